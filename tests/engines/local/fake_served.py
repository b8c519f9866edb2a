"""A stand-in for llama.cpp's server, served by Conch's real launcher (engines/local/serve.py).

``BundledRuntime(server=(python, this file, "--crash", MODE))`` starts the real launcher (its
fork, its exits file, its hold routes, its idle exit) with this small ASGI app in place of
llama.cpp's, so sharing a runtime can be tested in a second. The app answers
``GET /v1/models`` and ``POST /v1/chat/completions`` (one word, or a few streamed words) and,
with ``--crash answer-SIG``, ends the process by that signal right after a streamed answer's
first word. Every start appends its arguments to ``fake-runtime-starts.jsonl`` in the working
directory, as ``fake_runtime.py`` does.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

from engines.local import serve

WORDS = ("Red", ", green", " and", " blue", ".")


def fake_app(args: Sequence[str]) -> serve.ASGIApp:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--crash", default="none")
    parser.add_argument("--model_alias", default="model")
    known, _ = parser.parse_known_args(list(args))
    with open("fake-runtime-starts.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(list(args)) + "\n")
    print("fake served: model loaded", flush=True)

    async def app(scope: serve.Scope, receive: serve.Receive, send: serve.Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = str(scope["path"]).rstrip("/")
        if path == "/v1/models":
            await answer(send, 200, {"object": "list", "data": [{"id": known.model_alias}]})
            return
        if path != "/v1/chat/completions":
            await answer(send, 404, {"error": {"message": "not found"}})
            return
        request = json.loads(body or b"{}")
        print(f"fake served: chat, {len(request.get('messages', []))} messages", flush=True)
        if not request.get("stream"):
            message = {"role": "assistant", "content": "Hello"}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            await answer(send, 200, {"object": "chat.completion", "choices": [choice]})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for i, word in enumerate(WORDS):
            finish = "stop" if i == len(WORDS) - 1 else None
            chunk = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": finish}]}
            await send(
                {
                    "type": "http.response.body",
                    "body": f"data: {json.dumps(chunk)}\n\n".encode(),
                    "more_body": True,
                }
            )
            where, _, how = known.crash.partition("-")
            if i == 0 and where == "answer":
                sys.stdout.flush()
                signal.raise_signal(getattr(signal, how))
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    return app


async def answer(send: serve.Send, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": data})


if __name__ == "__main__":
    raise SystemExit(serve.main(sys.argv[1:], build=fake_app))
