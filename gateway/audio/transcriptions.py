"""POST /v1/audio/transcriptions and /v1/audio/translations on a speech-to-text worker."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from gateway.audio import formats
from gateway.audio.transcription_schemas import (
    Transcription,
    TranscriptTextDelta,
    TranscriptTextDone,
)
from gateway.audio.upload import AudioForm, parse_form, read_form
from gateway.doors.disconnect import until_disconnected
from gateway.doors.kinds import require_kind
from gateway.doors.relay import abort_all, error_for, outputs, peek_first, submit_all
from gateway.doors.streaming import SSE_HEADERS, sse
from gateway.plane.hub import Hub, Stream
from protocol.messages import RequestOutput, Segment, Transcribe


class _Result:
    """What the worker said so far about one request."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.language = ""
        self.duration = 0.0

    def feed(self, out: RequestOutput) -> str:
        self.segments.extend(out.segments)
        self.language = out.language or self.language
        self.duration = out.duration or self.duration
        return out.text


class AudioEndpoints:
    """Transcription and translation: one Transcribe job per upload, outputs relayed."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def transcriptions(self, request: Request) -> Response:
        """Handle one POST /v1/audio/transcriptions."""
        return await self._handle(request, "transcribe", "/v1/audio/transcriptions")

    async def translations(self, request: Request) -> Response:
        """Handle one POST /v1/audio/translations (speech in any language -> English text)."""
        return await self._handle(request, "translate", "/v1/audio/translations")

    async def _handle(self, request: Request, task: str, path: str) -> Response:
        form = await parse_form(await read_form(request), task)
        st = await self.hub.wait_ready(form.model)
        require_kind(st, "transcribe", path)
        rid = f"audio-{uuid.uuid4().hex}"
        job = Transcribe(request_id=rid, audio=form.file, filename=form.filename, task=task,
                         language=form.language, prompt=form.prompt,
                         temperature=form.temperature, stream=form.stream,
                         word_timestamps="word" in form.granularities)
        streams = submit_all(self.hub, form.model, [job])
        try:
            firsts = await until_disconnected(request, peek_first(self.hub, streams))
        except BaseException:
            abort_all(self.hub, streams)
            raise
        if form.stream:
            return StreamingResponse(self._stream(streams[0], firsts[0]),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        try:
            result = await until_disconnected(request, self._collect(streams[0], firsts[0]))
        finally:
            abort_all(self.hub, streams)
        return render(form, task, result)

    async def _collect(self, stream: Stream, first: RequestOutput) -> _Result:
        result = _Result()
        async for item in outputs(stream, first):
            if not isinstance(item, RequestOutput) or item.error is not None:
                raise error_for(item)
            result.feed(item)
        return result

    async def _stream(self, stream: Stream, first: RequestOutput) -> AsyncIterator[bytes]:
        result = _Result()
        try:
            async for item in outputs(stream, first):
                if not isinstance(item, RequestOutput) or item.error is not None:
                    yield sse(error_for(item).body())
                    return
                delta = result.feed(item)
                if delta:
                    yield sse(TranscriptTextDelta(delta=delta))
            yield sse(TranscriptTextDone(text=formats.full_text(result.segments),
                                         usage=formats.usage(result.duration)))
        finally:
            abort_all(self.hub, [stream])


def render(form: AudioForm, task: str, result: _Result) -> Response:
    """The finished transcription in FORM's response_format."""
    fmt, segs = form.response_format, result.segments
    if fmt == "text":
        return PlainTextResponse(formats.full_text(segs) + "\n")
    if fmt == "srt":
        return PlainTextResponse(formats.srt(segs), media_type="application/x-subrip")
    if fmt == "vtt":
        return PlainTextResponse(formats.vtt(segs), media_type="text/vtt")
    if fmt == "verbose_json":
        language = "english" if task == "translate" else result.language
        return JSONResponse(msgspec.to_builtins(formats.verbose(
            task, language, result.duration, segs, words="word" in form.granularities)))
    return JSONResponse(msgspec.to_builtins(Transcription(
        text=formats.full_text(segs), usage=formats.usage(result.duration))))
