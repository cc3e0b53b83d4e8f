"""POST /v1/audio/speech: text to speech (the whole file, chunked audio, or SSE deltas), and
GET /v1/audio/voices: the voices of every served text-to-speech model."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.audio.openai_voices import openai_voice
from gateway.audio.speech_schemas import (
    SpeechAudioDelta,
    SpeechAudioDone,
    SpeechRequest,
    SpeechUsage,
    SpeechVoiceList,
    SpeechVoices,
)
from gateway.doors.disconnect import until_disconnected
from gateway.doors.kinds import require_kind
from gateway.doors.relay import abort_all, error_for, outputs, peek_first, submit_all
from gateway.doors.streaming import SSE_HEADERS
from gateway.edge.errors import bad_request, read_body
from gateway.plane.hub import Hub, Stream, Terminal
from protocol.messages import ModelFacts, RequestOutput, Speak


def event(ev: SpeechAudioDelta | SpeechAudioDone | dict[str, object]) -> bytes:
    """One named SSE event (`event: TYPE` then its `data:` JSON), as OpenAI sends them."""
    kind = ev.get("type", "error") if isinstance(ev, dict) else ev.__struct_config__.tag
    return b"event: " + str(kind).encode() + b"\ndata: " + msgspec.json.encode(ev) + b"\n\n"


CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
                 "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}


def check_voice(voice: str, facts: ModelFacts | None, alias: str) -> str:
    """VOICE if the model has it (the default voice when empty, an OpenAI voice name mapped by
    gateway/audio/openai_voices.py); a 400 listing its voices if not."""
    voices = facts.voices if facts is not None else []
    if not voices:
        return voice
    if not voice:
        return voices[0]
    if voice not in voices and (mapped := openai_voice(voice, voices)) is not None:
        return mapped
    if voice not in voices:
        raise bad_request(f"The voice '{voice}' is not a voice of the model '{alias}'. Its voices "
                          f"are: {', '.join(voices)} (GET /v1/audio/voices lists them).",
                          param="voice", code="unknown_voice")
    return voice


class SpeechEndpoint:
    """Validates a speech request, submits one Speak job, relays its audio."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def handle(self, request: Request) -> Response:
        """Handle one POST /v1/audio/speech."""
        req = await read_body(request, SpeechRequest)
        if not req.input.strip():
            raise bad_request("input is empty: give the text to speak.", param="input")
        st = await self.hub.wait_ready(req.model)
        require_kind(st, "speech", "/v1/audio/speech")
        voice = check_voice(req.voice_id, st.facts, req.model)
        sid = f"speech-{uuid.uuid4().hex}"
        job = Speak(request_id=sid, text=req.input, voice=voice, speed=req.speed,
                    instructions=req.instructions, audio_format=req.response_format,
                    stream=req.stream_format is not None)
        streams = submit_all(self.hub, req.model, [job])
        try:
            first = (await until_disconnected(request, peek_first(self.hub, streams)))[0]
        except BaseException:
            abort_all(self.hub, streams)
            raise
        media = CONTENT_TYPES[req.response_format]
        if req.stream_format == "audio":
            return StreamingResponse(self._audio(streams[0], first), media_type=media)
        if req.stream_format == "sse":
            return StreamingResponse(self._events(streams[0], first),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        try:
            body = await until_disconnected(request, self._collect(streams[0], first))
        finally:
            abort_all(self.hub, streams)
        return Response(body, media_type=media)

    async def _collect(self, stream: Stream, first: RequestOutput) -> bytes:
        parts: list[bytes] = []
        async for item in outputs(stream, first):
            if isinstance(item, Terminal) or item.error is not None:
                raise error_for(item)
            parts.append(item.audio)
        return b"".join(parts)

    async def _audio(self, stream: Stream, first: RequestOutput) -> AsyncIterator[bytes]:
        """The file's bytes as the worker encodes them (a failure mid-way ends the stream)."""
        try:
            async for item in outputs(stream, first):
                if isinstance(item, Terminal) or item.error is not None:
                    return  # the status line is sent: a short file is all a client can see
                if item.audio:
                    yield item.audio
        finally:
            abort_all(self.hub, [stream])

    async def _events(self, stream: Stream, first: RequestOutput) -> AsyncIterator[bytes]:
        """speech.audio.delta events (base64 audio), then speech.audio.done with usage."""
        try:
            async for item in outputs(stream, first):
                if isinstance(item, Terminal) or item.error is not None:
                    yield event(error_for(item).body())
                    return
                if item.audio:
                    yield event(SpeechAudioDelta(audio=base64.b64encode(item.audio).decode()))
                if item.finish_reason is not None:
                    usage = SpeechUsage(input_tokens=item.prompt_tokens,
                                        output_tokens=item.completion_tokens,
                                        total_tokens=item.prompt_tokens + item.completion_tokens)
                    yield event(SpeechAudioDone(usage=usage))
        finally:
            abort_all(self.hub, [stream])

    async def voices(self, request: Request) -> Response:
        """GET /v1/audio/voices[?model=ALIAS]: each ready speech model's voices (default first)."""
        want = request.query_params.get("model")
        if want is not None:
            self.hub.lookup(want)  # the 404 naming what is served
        data = [SpeechVoices(model=alias, voices=st.facts.voices, default_voice=st.facts.voices[0]
                             if st.facts.voices else None, sample_rate=st.facts.sample_rate)
                for alias, st in self.hub.aliases.items()
                if st.facts is not None and st.facts.kind == "speech" and want in (None, alias)]
        return JSONResponse(msgspec.to_builtins(SpeechVoiceList(data=data)))
