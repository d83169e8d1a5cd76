// The official TypeScript SDK against Citegate's Anthropic-compatible API, run by
// tests/e2e/test_anthropic_ts_sdk.py: uploads a text file and a PDF, asks about them whole and
// streamed, counts tokens, provokes the SDK's error classes, and prints what it got as JSON.
import Anthropic, { toFile } from "@anthropic-ai/sdk";
import { readFile } from "node:fs/promises";

const baseURL = `${process.env.CITEGATE_BASE_URL}/anthropic`;
const client = new Anthropic({ baseURL, apiKey: process.env.CITEGATE_KEY, maxRetries: 0 });
const model = "claude-sonnet-5";

const text = await client.files.upload({
  file: await toFile(Buffer.from(process.env.CITEGATE_TEXT), "grass.txt", { type: "text/plain" }),
});
const pdf = await client.files.upload({
  file: await toFile(await readFile(process.env.CITEGATE_PDF), "letter.pdf", {
    type: "application/pdf",
  }),
});
const listed = [];
for await (const file of client.files.list({ limit: 1 })) listed.push(file.id);

const document = (file) => ({
  type: "document",
  source: { type: "file", file_id: file.id },
  citations: { enabled: true },
});
const messages = [
  {
    role: "user",
    content: [document(text), document(pdf), { type: "text", text: process.env.CITEGATE_QUESTION }],
  },
];
const { data: created, response } = await client.messages
  .create({ model, max_tokens: 500, messages })
  .withResponse();
const streamed = await client.messages.stream({ model, max_tokens: 500, messages }).finalMessage();
const counted = await client.messages.countTokens({ model, messages });

const classes = ["AuthenticationError", "NotFoundError", "BadRequestError", "RateLimitError"];
async function errorClass(promise) {
  try {
    await promise;
    return null;
  } catch (error) {
    return classes.find((name) => error instanceof Anthropic[name]) ?? String(error);
  }
}
const stranger = new Anthropic({ baseURL, apiKey: "cg_not_a_key", maxRetries: 0 });
const missing = [{ role: "user", content: [document({ id: "doc_missing" }), { type: "text", text: "?" }] }];
const errors = {
  badKey: await errorClass(stranger.files.list()),
  unknownFile: await errorClass(client.messages.create({ model, max_tokens: 10, messages: missing })),
  invalidBody: await errorClass(client.messages.create({ model, max_tokens: 0, messages })),
};

console.log(
  JSON.stringify({
    files: [text, pdf],
    listed,
    answerId: response.headers.get("citegate-answer-id"),
    created,
    streamed,
    counted,
    errors,
  }),
);
