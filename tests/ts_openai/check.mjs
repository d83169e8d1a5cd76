// The official OpenAI TypeScript SDK against Citegate's OpenAI-compatible API, run by
// tests/e2e/test_openai_ts_sdk.py: uploads files, makes a vector store and searches it, asks
// Chat Completions (whole and streamed) and Responses (with file_search, streamed, and a
// follow-up), provokes the SDK's error classes, and prints what it got as JSON.
import OpenAI, { toFile } from "openai";
import { readFile } from "node:fs/promises";

const baseURL = `${process.env.CITEGATE_BASE_URL}/openai/v1`;
const client = new OpenAI({ baseURL, apiKey: process.env.CITEGATE_KEY, maxRetries: 0 });
const model = "claude-sonnet-5";

const text = await client.files.create({
  file: await toFile(Buffer.from(process.env.CITEGATE_TEXT), "grass.txt", { type: "text/plain" }),
  purpose: "assistants",
});
const pdf = await client.files.create({
  file: await toFile(await readFile(process.env.CITEGATE_PDF), "letter.pdf", {
    type: "application/pdf",
  }),
  purpose: "user_data",
});
const listed = [];
for await (const file of client.files.list({ limit: 1 })) listed.push(file.id);

const store = await client.vectorStores.create({ name: "Mixed", file_ids: [text.id] });
await client.vectorStores.files.create(store.id, { file_id: pdf.id });
const storeFiles = [];
for await (const file of client.vectorStores.files.list(store.id)) storeFiles.push(file.id);
const searched = [];
for await (const result of client.vectorStores.search(store.id, { query: "grass color" })) {
  searched.push(result);
}

const messages = [
  {
    role: "user",
    content: [
      { type: "file", file: { file_id: text.id } },
      { type: "file", file: { file_id: pdf.id } },
      { type: "text", text: process.env.CITEGATE_QUESTION },
    ],
  },
];
const { data: completion, response } = await client.chat.completions
  .create({ model, messages })
  .withResponse();
const chunks = [];
const stream = await client.chat.completions.create({
  model,
  messages,
  stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) chunks.push(chunk);

const tools = [{ type: "file_search", vector_store_ids: [store.id], max_num_results: 5 }];
const answered = await client.responses.create({
  model,
  input: "What color is the grass?",
  tools,
  include: ["file_search_call.results"],
});
const events = [];
const responseStream = await client.responses.create({
  model,
  input: "What color is the grass?",
  tools,
  stream: true,
});
for await (const event of responseStream) events.push(event);
const followUp = await client.responses.create({
  model,
  input: "And the sky?",
  previous_response_id: answered.id,
});
const retrieved = await client.responses.retrieve(followUp.id);

const classes = ["AuthenticationError", "NotFoundError", "BadRequestError", "RateLimitError"];
async function errorOf(promise) {
  try {
    await promise;
    return null;
  } catch (error) {
    return {
      class: classes.find((name) => error instanceof OpenAI[name]) ?? String(error),
      param: error.param ?? null,
      code: error.code ?? null,
    };
  }
}
const stranger = new OpenAI({ baseURL, apiKey: "cg_not_a_key", maxRetries: 0 });
const missing = [
  {
    role: "user",
    content: [
      { type: "file", file: { file_id: "doc_missing" } },
      { type: "text", text: "?" },
    ],
  },
];
const errors = {
  badKey: await errorOf(stranger.files.list()),
  unknownFile: await errorOf(client.chat.completions.create({ model, messages: missing })),
  severalChoices: await errorOf(client.chat.completions.create({ model, messages, n: 2 })),
  otherTool: await errorOf(
    client.responses.create({ model, input: "?", tools: [{ type: "web_search" }] }),
  ),
};

console.log(
  JSON.stringify({
    files: [text, pdf],
    listed,
    store,
    storeFiles,
    searched,
    completion,
    answerId: response.headers.get("citegate-answer-id"),
    chunks,
    answered,
    events,
    followUp,
    retrieved,
    errors,
  }),
);
