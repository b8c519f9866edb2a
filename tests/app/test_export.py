"""Exporting a chat as Markdown and JSON, against a real chat log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.export import ExportError, export_chat, suggested_name, to_data, to_json, to_markdown
from app.store import ChatStore
from app.tool_calls import keep_tool_call
from engines.base import Attachment, Picture, ToolResult


def _chat(store: ChatStore) -> str:
    chat = store.create_chat("Garden: plans/ideas?", model_key="ollama/llama3")
    store.append_message(
        chat.id,
        "user",
        "What about slugs?",
        attachments=[Attachment(name="beds.txt", text="three beds")],
        pictures=[Picture(name="leaf.png", data="aGk=")],
    )
    first = store.append_message(chat.id, "assistant", "Beer traps.", model_key="ollama/llama3")
    again = store.append_message(
        chat.id, "assistant", "Copper tape.", model_key="ollama/llama3", version_of=first.seq
    )
    store.show_version(chat.id, again.seq)
    store.append_message(chat.id, "user", "And snails?")
    store.add_compaction(chat.id, 3, "The person grows lettuce.\nSlugs are the problem.", "llama3")
    return chat.id


def test_markdown_holds_every_shown_message_and_the_summary_as_text(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat_id = _chat(store)

    text = to_markdown(store, chat_id, lambda key: key.split("/")[-1].title())

    assert text.startswith("# Garden: plans/ideas?\n")
    assert "**You:**\n\nWhat about slugs?" in text
    assert "*Attached: beds.txt*" in text and "*Picture: leaf.png*" in text
    assert "**Llama3:**\n\nCopper tape." in text
    assert "Beer traps." not in text  # a version set aside is not what the chat shows
    assert "> The person grows lettuce.\n> Slugs are the problem." in text
    assert text.index("Slugs are the problem.") < text.index("And snails?")


def test_json_holds_messages_versions_and_summaries_but_no_setting(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat_id = _chat(store)

    data = json.loads(json.dumps(to_data(store, chat_id)))

    assert data["format"] == "conch-chat" and data["title"] == "Garden: plans/ideas?"
    assert [m["text"] for m in data["messages"]] == [
        "What about slugs?",
        "Copper tape.",
        "And snails?",
    ]
    assert data["messages"][0]["attachments"] == [{"name": "beds.txt", "text": "three beds"}]
    assert data["messages"][0]["pictures"][0]["data"] == "aGk="
    assert [v["text"] for v in data["messages"][1]["other_versions"]] == ["Beer traps."]
    assert data["summaries"][0]["text"].startswith("The person grows lettuce.")
    assert set(data) == {
        "format",
        "version",
        "exported",
        "title",
        "folder",
        "pinned",
        "created",
        "model",
        "messages",
        "summaries",
    }


def test_export_chat_picks_the_format_by_the_file_name(data_dir: Path, tmp_path: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat_id = _chat(store)

    md = export_chat(store, chat_id, tmp_path / "a.md")
    js = export_chat(store, chat_id, tmp_path / "a.JSON")

    assert md.read_text(encoding="utf-8").startswith("# Garden")
    assert json.loads(js.read_text(encoding="utf-8"))["format"] == "conch-chat"


def test_a_folder_that_cannot_be_written_says_so_in_one_sentence(
    data_dir: Path, tmp_path: Path
) -> None:
    store = ChatStore.in_dir(data_dir)
    chat_id = _chat(store)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")

    with pytest.raises(ExportError) as caught:
        export_chat(store, chat_id, blocker / "chat.md")

    assert str(caught.value).startswith("The chat could not be saved to chat.md (")
    assert str(caught.value).endswith("choose another folder.")


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Garden: plans/ideas?", "Garden plans ideas 2026-11-30.md"),
        ("  ../../etc/passwd  ", "etc passwd 2026-11-30.md"),
        ("Café — naïve <résumé>", "Café naïve résumé 2026-11-30.md"),
        ("???", "Chat 2026-11-30.md"),
        ("CON", "Chat CON 2026-11-30.md"),
        ("x" * 300, "x" * 80 + " 2026-11-30.md"),
    ],
)
def test_a_suggested_file_name_is_the_title_and_date_in_safe_characters(
    title: str, expected: str
) -> None:
    from datetime import datetime

    noon = datetime(2026, 11, 30, 12, 0).timestamp()
    assert suggested_name(title, noon) == expected
    assert suggested_name(title, noon, "json").endswith(" 2026-11-30.json")


def _chat_with_a_tool(store: ChatStore) -> str:
    chat = store.create_chat("Shopping", model_key="ollama/llama3")
    store.append_message(chat.id, "user", "What is on my list?")
    call = ToolResult(
        call_id="c1",
        tool="read_file",
        server="Files",
        arguments={"path": "list.md"},
        status="done",
        text="# List\n\n- eggs\n```sh\nrm -rf /\n```",
        preview="# List",
    )
    keep_tool_call(store, chat.id, call, "ollama/llama3")
    store.append_message(chat.id, "assistant", "Eggs.", model_key="ollama/llama3")
    return chat.id


def test_markdown_shows_a_tool_result_as_a_labelled_quoted_block_not_as_markup(
    data_dir: Path,
) -> None:
    store = ChatStore.in_dir(data_dir)
    chat_id = _chat_with_a_tool(store)

    text = to_markdown(store, chat_id, lambda key: key.split("/")[-1].title())

    assert "**Tool result · read_file (Files):**" in text
    # Quoted and fenced longer than the fence inside it: the file's heading and its code
    # block stay the tool's text, not the export's own structure.
    assert "> ````text\n> # List\n>\n> - eggs\n> ```sh\n> rm -rf /\n> ```\n> ````" in text
    assert "\n# List" not in text
    assert text.index("What is on my list?") < text.index("read_file") < text.index("Eggs.")


def test_json_keeps_a_tool_result_with_its_role_and_the_call(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat_id = _chat_with_a_tool(store)

    data = json.loads(to_json(store, chat_id))

    assert [m["role"] for m in data["messages"]] == ["user", "tool", "assistant"]
    tool = data["messages"][1]
    assert tool["text"].startswith("# List")
    assert tool["tool"] == {
        "name": "read_file",
        "server": "Files",
        "arguments": {"path": "list.md"},
        "status": "done",
    }
    assert "tool" not in data["messages"][2]
