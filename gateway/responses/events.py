"""Build a response's output items from parsed deltas, as stream events and as the final object.

The non-streamed answer runs the same builder and keeps only the final object, so the streamed
deltas always concatenate to the non-streamed texts.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from gateway.doors.choice import Delta


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseBuilder:
    """Turns ChoiceAssembler deltas into Responses API events and output items."""

    def __init__(self, rid: str, echo: dict[str, Any], parallel_tool_calls: bool) -> None:
        self.rid = rid
        self.echo = echo  # the request fields every response object repeats
        self.parallel = parallel_tool_calls
        self.created_at = int(time.time())
        self.seq = 0
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        self.calls: dict[int, dict[str, Any]] = {}  # parser call index -> item
        self.where: dict[str, int] = {}  # item id -> its output index (items only get appended)
        self.reasoning_tokens = 0.0
        self.namespaces: dict[str, str] = {}  # function name -> its namespace tool's name

    def _ev(self, type_: str, **fields: Any) -> dict[str, Any]:
        ev = {"type": type_, "sequence_number": self.seq, **fields}
        self.seq += 1
        return ev

    def response(self, status: str, usage: dict[str, Any] | None = None,
                 error: dict[str, str] | None = None) -> dict[str, Any]:
        """The response object in STATUS (`usage` only once known: OpenAI's schema has no null)."""
        done = status in ("completed", "incomplete")
        return {"id": self.rid, "object": "response", "created_at": self.created_at,
                "completed_at": int(time.time()) if done else None, "status": status,
                "error": error, "incomplete_details": {"reason": "max_output_tokens"}
                if status == "incomplete" else None, "output": self.output if status !=
                "in_progress" else [], **({"usage": usage} if usage is not None else {}),
                **self.echo}

    def start(self) -> list[dict[str, Any]]:
        """response.created and response.in_progress."""
        return [self._ev("response.created", response=self.response("in_progress")),
                self._ev("response.in_progress", response=self.response("in_progress"))]

    def _append(self, item: dict[str, Any]) -> int:
        """Add ITEM to the output; its index there."""
        self.where[item["id"]] = len(self.output)
        self.output.append(item)
        return len(self.output) - 1

    def _open(self, kind: str) -> list[dict[str, Any]]:
        evs = self._close("completed") if self.open is not None else []
        if kind == "reasoning":
            item: dict[str, Any] = {"id": _id("rs"), "type": "reasoning", "summary": [],
                                    "content": [], "status": "in_progress"}
        else:
            item = {"id": _id("msg"), "type": "message", "role": "assistant", "content": [],
                    "status": "in_progress"}
        self.open = item
        idx = self._append(item)
        part = ({"type": "reasoning_text", "text": ""} if kind == "reasoning" else
                {"type": "output_text", "text": "", "annotations": [], "logprobs": []})
        evs.append(self._ev("response.output_item.added", output_index=idx, item=dict(
            item, content=[])))
        item["content"].append(part)
        evs.append(self._ev("response.content_part.added", item_id=item["id"], output_index=idx,
                            content_index=0, part=dict(part)))
        return evs

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self.open = self.open, None
        if item is None:
            return []
        idx = self.where[item["id"]]
        item["status"] = status
        part = item["content"][0]
        if item["type"] == "reasoning":
            evs = [self._ev("response.reasoning_text.done", item_id=item["id"], output_index=idx,
                            content_index=0, text=part["text"])]
        else:
            evs = [self._ev("response.output_text.done", item_id=item["id"], output_index=idx,
                            content_index=0, text=part["text"], logprobs=[])]
        evs.append(self._ev("response.content_part.done", item_id=item["id"], output_index=idx,
                            content_index=0, part=dict(part)))
        evs.append(self._ev("response.output_item.done", output_index=idx, item=item))
        return evs

    def _text(self, kind: str, text: str) -> list[dict[str, Any]]:
        evs = [] if self.open is not None and self.open["type"] == kind else self._open(kind)
        assert self.open is not None
        idx = len(self.output) - 1
        self.open["content"][0]["text"] += text
        name = "response.reasoning_text.delta" if kind == "reasoning" else \
            "response.output_text.delta"
        extra: dict[str, Any] = {} if kind == "reasoning" else {"logprobs": []}
        evs.append(self._ev(name, item_id=self.open["id"], output_index=idx, content_index=0,
                            delta=text, **extra))
        return evs

    def _call(self, tc: dict[str, Any]) -> list[dict[str, Any]]:
        index = tc["index"]
        if index > 0 and not self.parallel:
            return []
        evs: list[dict[str, Any]] = []
        item = self.calls.get(index)
        if item is None:
            evs = self._close("completed")
            item = {"id": _id("fc"), "type": "function_call", "status": "in_progress",
                    "arguments": "", "call_id": tc.get("id") or _id("call"),
                    "name": tc["function"].get("name") or ""}
            if item["name"] in self.namespaces:
                item["namespace"] = self.namespaces[item["name"]]
            self.calls[index] = item
            evs.append(self._ev("response.output_item.added", output_index=self._append(item),
                                item=dict(item)))
        args = tc["function"].get("arguments") or ""
        if args:
            item["arguments"] += args
            evs.append(self._ev("response.function_call_arguments.delta", item_id=item["id"],
                                output_index=self.where[item["id"]], delta=args))
        return evs

    def feed(self, delta: Delta, new_tokens: int) -> list[dict[str, Any]]:
        """The events of one step; NEW_TOKENS of it count as reasoning in proportion."""
        total = len(delta.reasoning) + len(delta.content)
        if delta.reasoning:
            self.reasoning_tokens += new_tokens * len(delta.reasoning) / max(total, 1)
        elif not total and self.open is not None and self.open["type"] == "reasoning":
            self.reasoning_tokens += new_tokens  # buffered inside the thinking block
        evs: list[dict[str, Any]] = []
        if delta.reasoning:
            evs += self._text("reasoning", delta.reasoning)
        if delta.content:
            evs += self._text("message", delta.content)
        for tc in delta.tool_calls:
            evs += self._call(tc)
        return evs

    def finish(self, finish_reason: str | None, usage: dict[str, Any]
               ) -> list[dict[str, Any]]:
        """Close every item and end with response.completed or response.incomplete."""
        status = "incomplete" if finish_reason == "length" else "completed"
        evs = self._close(status)
        for item in self.calls.values():
            idx = self.where[item["id"]]
            item["status"] = status
            evs.append(self._ev("response.function_call_arguments.done", item_id=item["id"],
                                name=item["name"], output_index=idx,
                                arguments=item["arguments"]))
            evs.append(self._ev("response.output_item.done", output_index=idx, item=item))
        usage["output_tokens_details"]["reasoning_tokens"] = round(self.reasoning_tokens)
        evs.append(self._ev(f"response.{status}", response=self.response(status, usage)))
        return evs

    def fail(self, code: str, message: str) -> list[dict[str, Any]]:
        """End the stream with response.failed."""
        self.open = None
        return [self._ev("response.failed", response=self.response(
            "failed", error={"code": code, "message": message}))]
