"""The OpenAPI document: committed as openapi.json, served at /openapi.json, and complete
enough for generated clients: operation ids, typed problems, the citation union, the stream."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
import jsonschema_rs
import pytest
from pydantic import ValidationError

from app.answers.schemas import AnswerRequest
from app.api.problems import codes_of
from app.errors import ErrorCode
from app.openapi import COMMAND, DEFAULT_PATH, document, render
from app.settings import Settings
from tests.conftest import behind
from tests.fake_upstream import GRASS, FakeUpstream, Reply, message, sse_message

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_REF = "#/components/schemas/Problem"

# API.md: (method, path) -> operationId.
CONTRACT = {
    ("post", "/v1/documents/upload"): "uploadDocument",
    ("post", "/v1/documents"): "createDocument",
    ("get", "/v1/documents"): "listDocuments",
    ("get", "/v1/documents/{document_id}"): "getDocument",
    ("get", "/v1/documents/{document_id}/content"): "getDocumentContent",
    ("get", "/v1/documents/{document_id}/chunks"): "listDocumentChunks",
    ("get", "/v1/documents/{document_id}/pages"): "listDocumentPages",
    ("delete", "/v1/documents/{document_id}"): "deleteDocument",
    ("post", "/v1/answers"): "createAnswer",
    ("get", "/v1/answers/{answer_id}"): "getAnswer",
    ("post", "/v1/answers/count-tokens"): "countAnswerTokens",
    ("get", "/v1/documents/{document_id}/pages/{page_number}/image"): "getDocumentPageImage",
    ("post", "/v1/answers/{answer_id}/share-links"): "createAnswerShareLink",
    ("delete", "/v1/answers/{answer_id}"): "deleteAnswer",
    ("post", "/v1/conversations"): "createConversation",
    ("get", "/v1/conversations/{conversation_id}"): "getConversation",
    ("get", "/v1/conversations"): "listConversations",
    ("delete", "/v1/conversations/{conversation_id}"): "deleteConversation",
    ("post", "/v1/collections"): "createCollection",
    ("get", "/v1/collections"): "listCollections",
    ("get", "/v1/collections/{collection_id}"): "getCollection",
    ("delete", "/v1/collections/{collection_id}"): "deleteCollection",
    ("post", "/v1/collections/{collection_id}/documents"): "addCollectionDocuments",
    (
        "delete",
        "/v1/collections/{collection_id}/documents/{document_id}",
    ): "removeCollectionDocument",
    ("get", "/v1/collections/{collection_id}/documents"): "listCollectionDocuments",
    ("post", "/v1/search"): "searchPassages",
    ("post", "/v1/answer-batches"): "createAnswerBatch",
    ("get", "/v1/answer-batches"): "listAnswerBatches",
    ("get", "/v1/answer-batches/{batch_id}"): "getAnswerBatch",
    ("get", "/v1/answer-batches/{batch_id}/results"): "listAnswerBatchResults",
    ("post", "/v1/answer-batches/{batch_id}/cancel"): "cancelAnswerBatch",
    ("post", "/v1/admin/tenants"): "createTenant",
    ("get", "/v1/admin/tenants"): "listTenants",
    ("get", "/v1/admin/tenants/{tenant_id}"): "getTenant",
    ("patch", "/v1/admin/tenants/{tenant_id}"): "updateTenant",
    ("post", "/v1/admin/api-keys"): "createApiKey",
    ("get", "/v1/admin/api-keys"): "listApiKeys",
    ("get", "/v1/admin/api-keys/{key_id}"): "getApiKey",
    ("patch", "/v1/admin/api-keys/{key_id}"): "updateApiKey",
    ("delete", "/v1/admin/api-keys/{key_id}"): "revokeApiKey",
    ("post", "/v1/admin/api-keys/{key_id}/rotate"): "rotateApiKey",
    ("get", "/v1/admin/audit-events"): "listAuditEvents",
    ("get", "/v1/admin/usage"): "getUsageReport",
    ("get", "/v1/admin/costs"): "getCostReport",
    ("get", "/healthz"): "getHealth",
    ("get", "/readyz"): "getReadiness",
}
UPSTREAM_OPERATIONS = {
    "createAnswer",
    "countAnswerTokens",
    "createAnswerBatch",
    "cancelAnswerBatch",
}
# Ids in their bodies that are not found make errored results, not a 404.
NO_BODY_IDS = {"createAnswerBatch"}
STREAM_EVENTS = {
    "answer.started",
    "segment.started",
    "text.delta",
    "citation",
    "segment.done",
    "answer.done",
    "error",
}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return document()


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def validator(spec: dict[str, Any], schema: dict[str, Any]) -> jsonschema_rs.Validator:
    """A JSON Schema validator for a schema of the document, its $refs resolved in it."""
    return jsonschema_rs.Draft202012Validator(
        {"components": spec["components"], **schema}, validate_formats=True
    )


def test_committed_openapi_json_is_current() -> None:
    committed = DEFAULT_PATH.read_text(encoding="utf-8") if DEFAULT_PATH.exists() else ""
    current = render(document())
    if committed != current:
        diff = "".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    current.splitlines(keepends=True),
                    "openapi.json (committed)",
                    "openapi.json (the app now)",
                )
            )[:60]
        )
        pytest.fail(
            f"{DEFAULT_PATH.name} differs from the app's OpenAPI document; regenerate it with "
            f"`.venv/bin/{COMMAND}` and commit it.\n{diff}",
            pytrace=False,
        )


def test_the_served_document_is_the_committed_one(client: httpx.Client) -> None:
    served = client.get("/openapi.json")
    assert served.status_code == 200
    committed = json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))
    assert served.json() == committed, f"regenerate openapi.json: .venv/bin/{COMMAND}"


def test_the_generator_writes_to_a_given_path(tmp_path: Path) -> None:
    from app.openapi import main

    target = tmp_path / "spec.json"
    assert main([str(target)]) == 0
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n") and json.loads(text) == document()
    assert main(["--bogus"]) == 2


def test_every_operation_has_its_contract_id_and_a_summary(spec: dict[str, Any]) -> None:
    found = {(method, path): op["operationId"] for method, path, op in operations(spec)}
    assert found == CONTRACT
    for method, path, operation in operations(spec):
        assert operation.get("summary"), (method, path)
        assert operation.get("tags"), (method, path)


def test_every_error_is_a_documented_problem(spec: dict[str, Any]) -> None:
    for method, path, operation in operations(spec):
        responses = operation["responses"]
        where = f"{method.upper()} {path}"
        errors = {int(status) for status in responses if status[0] in "45"}
        if path.startswith("/v1/"):
            assert {401, 429, 503} <= errors, where  # the auth dependency, and the database
            assert operation["security"] == [{"ApiKey": []}], where
        has_input = bool(operation.get("parameters")) or "requestBody" in operation
        assert (422 in errors) == has_input, where
        assert (400 in errors) == ("requestBody" in operation), where  # an unparsable body
        with_ids = (UPSTREAM_OPERATIONS - NO_BODY_IDS) | {"createConversation"}
        if "{" in path or operation["operationId"] in with_ids:
            assert 404 in errors, where  # an id in the path or in the body
        if operation["operationId"] in UPSTREAM_OPERATIONS:
            assert {413, 502, 503, 504} <= errors, where
        for status in errors - ({503} if path == "/readyz" else set()):
            response = responses[str(status)]
            assert response["description"], (where, status)
            assert list(response["content"]) == [PROBLEM_MEDIA_TYPE], (where, status)
            media = response["content"][PROBLEM_MEDIA_TYPE]
            assert media["schema"] == {"$ref": PROBLEM_REF}, (where, status)
            assert media["example"]["status"] == status, (where, status)
        for status in ({429, 503} & errors) - ({503} if path == "/readyz" else set()):
            assert "Retry-After" in responses[str(status)]["headers"], (where, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_every_problem_response_names_the_codes_of_its_status(spec: dict[str, Any]) -> None:
    for method, path, operation in operations(spec):
        for status, response in operation["responses"].items():
            if PROBLEM_MEDIA_TYPE not in response.get("content", {}):
                continue
            codes = codes_of(int(status))
            assert codes, (method, path, status)
            listed = re.findall(r"^- `([a-z0-9_]+)`: ", response["description"], re.MULTILINE)
            assert listed == [str(code) for code in codes], (method, path, status)
            example = response["content"][PROBLEM_MEDIA_TYPE]["example"]
            assert example["code"] in listed, (method, path, status)


def test_every_error_code_is_in_the_document(spec: dict[str, Any]) -> None:
    problem_codes = spec["components"]["schemas"]["Problem"]["properties"]["code"]["examples"]
    assert problem_codes == [str(code) for code in ErrorCode]
    declared = {
        code
        for _, _, operation in operations(spec)
        for response in operation["responses"].values()
        for code in re.findall(r"^- `([a-z0-9_]+)`: ", response["description"], re.MULTILINE)
    }
    # All but those answered before a route matches, or never over HTTP, a body's timeout,
    # which any request with a body may meet (it is the connection's, not the route's), and
    # those only the OpenAI-compatible routes give (not in this document: OpenAI's shape).
    assert set(ErrorCode) - declared == {
        ErrorCode.NOT_FOUND,
        ErrorCode.METHOD_NOT_ALLOWED,
        ErrorCode.REQUEST_TIMEOUT,
        ErrorCode.API_KEY_NOT_FOUND,
        ErrorCode.INTERNAL_ERROR,
        ErrorCode.UNSUPPORTED_PARAMETER,
        ErrorCode.INVALID_PARAMETER,
    }


def test_the_problem_component(spec: dict[str, Any]) -> None:
    problem = spec["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code"}
    assert set(problem["properties"]) == {
        "type",
        "title",
        "status",
        "detail",
        "code",
        "errors",
        "upstream_request_id",
        "retry_after",
    }
    valid = validator(spec, {"$ref": PROBLEM_REF})
    assert valid.is_valid(
        {"type": "urn:citegate:problem:x", "title": "T", "status": 422, "detail": "d", "code": "x"}
    )
    assert not valid.is_valid({"type": "t", "title": "T", "status": 422, "detail": "d"})


def test_citations_are_a_union_discriminated_by_type(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    citations = schemas["Segment"]["properties"]["citations"]["items"]
    assert citations["discriminator"]["propertyName"] == "type"
    mapping = citations["discriminator"]["mapping"]
    assert set(mapping) == {
        "char_location",
        "page_location",
        "content_block_location",
        "search_result_location",
        "web_search_result_location",
    }
    assert sorted(one["$ref"] for one in citations["oneOf"]) == sorted(mapping.values())
    for kind, ref in mapping.items():
        component = schemas[ref.rsplit("/", 1)[1]]
        assert component["properties"]["type"]["const"] == kind
        assert {"cited_text", "document_id", "span", "verified"} <= set(component["required"])
        assert component["additionalProperties"] is True  # upstream fields are kept


def test_create_answer_documents_json_and_the_event_stream(spec: dict[str, Any]) -> None:
    ok = spec["paths"]["/v1/answers"]["post"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AnswerOut"}
    events = ok["content"]["text/event-stream"]["schema"]["oneOf"]
    names = [event["properties"]["event"]["const"] for event in events]
    assert sorted(names) == sorted(STREAM_EVENTS)
    for name in STREAM_EVENTS:
        assert f"`{name}`" in ok["description"]
    data = {e["properties"]["event"]["const"]: e["properties"]["data"] for e in events}
    assert data["answer.done"]["contentSchema"] == {"$ref": "#/components/schemas/AnswerOut"}
    assert data["error"]["contentSchema"] == {"$ref": PROBLEM_REF}
    assert all(d["contentMediaType"] == "application/json" for d in data.values())


@pytest.mark.parametrize(
    "body",
    [
        {"question": "Q?", "document_ids": ["doc_a", "doc_b"]},
        {"question": "Q?", "document_ids": ["doc_a"], "conversation_id": None},
        {"question": "Q?", "document_ids": ["doc_a"], "model": "m", "system": "s", "stream": True},
        {"question": "Q?", "conversation_id": "conv_a"},
        {"question": "Q?", "conversation_id": "conv_a", "document_ids": None, "model": None},
        {"question": "Q?", "document_ids": ["doc_a"], "conversation_id": "conv_a"},
        {"question": "Q?"},
        {"question": "Q?", "document_ids": None, "conversation_id": None},
        {"question": "Q?", "conversation_id": "conv_a", "model": "m"},
        {"question": "Q?", "conversation_id": "conv_a", "system": "s"},
        {"question": "Q?", "document_ids": []},
        {"question": " \n", "document_ids": ["doc_a"]},
        {"question": "Q?", "document_ids": ["doc_a"], "temperature": 0.5},
        {"question": "Q?", "document_ids": ["doc_a"], "max_tokens": 0},
    ],
)
def test_the_answer_request_schema_accepts_what_the_server_accepts(
    spec: dict[str, Any], body: dict[str, Any]
) -> None:
    try:
        AnswerRequest.model_validate(body)
        accepted = True
    except ValidationError:
        accepted = False
    schema = {"$ref": "#/components/schemas/AnswerRequest"}
    assert validator(spec, schema).is_valid(body) == accepted, body


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_every_reference_resolves(spec: dict[str, Any]) -> None:
    refs = set(_refs(spec))
    assert refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in spec["components"]["schemas"], ref


def _examples(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    for name, schema in spec["components"]["schemas"].items():
        for example in schema.get("examples", []):
            yield name, {"$ref": f"#/components/schemas/{name}"}, example
    for method, path, operation in operations(spec):
        bodies = [operation.get("requestBody", {}), *operation["responses"].values()]
        for body in bodies:
            for media_type, media in body.get("content", {}).items():
                if "example" in media:
                    yield f"{method} {path} {media_type}", media["schema"], media["example"]


def test_every_example_matches_its_schema(spec: dict[str, Any]) -> None:
    examples = list(_examples(spec))
    assert len(examples) >= 10
    for where, schema, example in examples:
        errors = [str(error) for error in validator(spec, schema).iter_errors(example)]
        assert not errors, (where, errors)


def test_a_streamed_answer_matches_the_documented_events(
    client: httpx.Client, spec: dict[str, Any]
) -> None:
    document_id = client.post(
        "/v1/documents",
        json={"source": {"type": "text", "data": "The grass is green. The sky is blue."}},
    ).json()["id"]
    ok = spec["paths"]["/v1/answers"]["post"]["responses"]["200"]
    events = ok["content"]["text/event-stream"]["schema"]["oneOf"]
    data_validators = {
        event["properties"]["event"]["const"]: validator(
            spec, event["properties"]["data"]["contentSchema"]
        )
        for event in events
    }
    body = {"question": "What color is the grass?", "document_ids": [document_id]}
    with httpx_sse.connect_sse(
        client, "POST", "/v1/answers", json={**body, "stream": True}
    ) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        received = [(event.event, json.loads(event.data)) for event in source.iter_sse()]
    names = [name for name, _ in received]
    assert names[0] == "answer.started" and names[-1] == "answer.done", names
    assert "citation" in names and "text.delta" in names
    for name, data in received:
        errors = [str(error) for error in data_validators[name].iter_errors(data)]
        assert not errors, (name, errors)
    answer = client.post("/v1/answers", json=body)
    assert answer.status_code == 200
    assert validator(spec, {"$ref": "#/components/schemas/AnswerOut"}).is_valid(answer.json())


def test_no_description_shows_restructuredtext_markup(spec: dict[str, Any]) -> None:
    text = json.dumps(spec)
    assert not re.search(r"``\w", text), "descriptions are Markdown: one backtick for code"


def test_a_new_upstream_citation_type_passes_through_every_answer_route(
    settings: Settings, fake: FakeUpstream, client: httpx.Client
) -> None:
    """The schema lists the citation types of today; a new one is kept as the upstream sent
    it, and no route validates it away (or fails on it)."""
    future = {"type": "future_location", "cited_text": "green", "document_index": 0, "x": [1]}
    content = [{"type": "text", "text": "The grass is green", "citations": [future]}]
    fake.reset(Reply(body=message(content)))
    with behind(settings, fake) as app, httpx.Client(base_url=app.base_url, timeout=30) as http:
        document_id = http.post(
            "/v1/documents", json={"source": {"type": "text", "data": GRASS}}
        ).json()["id"]
        conversation = http.post("/v1/conversations", json={"document_ids": [document_id]})
        conversation_id = conversation.json()["id"]
        body = {"question": "What color is the grass?", "conversation_id": conversation_id}
        answer = http.post("/v1/answers", json=body)
        assert answer.status_code == 200, answer.text
        kept = {**future, "document_id": None, "span": None, "verified": False}
        (citation,) = answer.json()["segments"][0]["citations"]
        citation_support = citation.pop("support")
        assert citation_support["verdict"] == "supported"
        assert citation == kept
        stored = http.get(f"/v1/answers/{answer.json()['id']}")
        assert stored.status_code == 200 and stored.json() == answer.json()
        turns = http.get(f"/v1/conversations/{conversation_id}")
        assert turns.status_code == 200, turns.text
        assert turns.json()["answers"] == [answer.json()]
        fake.reset(Reply(events=sse_message(content)))
        with httpx_sse.connect_sse(http, "POST", "/v1/answers", json={**body, "stream": True}) as s:
            events = {event.event: json.loads(event.data) for event in s.iter_sse()}
        checked = {**kept, "support": citation_support}
        assert events["citation"]["citation"] == checked
        assert events["answer.done"]["segments"][0]["citations"] == [checked]
