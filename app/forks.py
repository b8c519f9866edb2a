"""New chats made from an old one: "Fork from here" and "New chat from summary".

A fork holds the messages up to the one chosen, with the summary that covered them if there
was one; a chat from a summary starts from the latest summary and holds only the messages after
it — the short way out of a long chat. Each is a chat of its own from then on (its own
transcript, folded by its own turns) with a link back to where it came from.

The copy keeps every mark of the source (untrusted, others, routine): what came from outside
stays marked, whichever chat it is now in.
"""

from __future__ import annotations

from app.store import Chat, ChatStore, Compaction, ForkLink

TITLE_MAX = 60  # characters of the source's title kept in the copy's


def _short(title: str) -> str:
    title = " ".join(title.split())
    return title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1].rstrip() + "…"


def fold_covering(store: ChatStore, chat_id: str, seq: int) -> Compaction | None:
    """The newest summary whose fold lies wholly at or before ``seq`` (a later fold summarises
    messages the fork does not hold). A withdrawn fold ends the search: what came before it no
    longer matched the chat."""
    rows = store.query(
        "SELECT first_kept_seq, summary, model, created FROM compactions "
        "WHERE chat_id = ? ORDER BY id DESC",
        (chat_id,),
    )
    for first_kept, summary, model, created in rows:
        if not summary:
            return None
        if int(first_kept) <= seq:
            return Compaction(chat_id, int(first_kept), str(summary), str(model), float(created))
    return None


def fork_from(store: ChatStore, chat_id: str, seq: int) -> Chat:
    """A new chat with the messages of ``chat_id`` up to and including ``seq``."""
    source = store.get_chat(chat_id)
    if source is None:
        raise LookupError(f"no chat {chat_id}")
    return store.copy_chat(
        chat_id,
        title=f"{_short(source.title)} (fork)",
        seqs=(0, seq + 1),
        link=ForkLink(chat_id, seq, "fork", source.title),
        fold=fold_covering(store, chat_id, seq),
    )


def from_summary(store: ChatStore, chat_id: str) -> Chat | None:
    """A new chat that starts from the latest summary of ``chat_id`` and holds the messages
    after it; None when the chat has no summary yet."""
    source = store.get_chat(chat_id)
    fold = store.latest_compaction(chat_id)
    if source is None or fold is None:
        return None
    return store.copy_chat(
        chat_id,
        title=f"{_short(source.title)} (from summary)",
        seqs=(fold.first_kept_seq, float("inf")),
        link=ForkLink(chat_id, fold.first_kept_seq, "summary", source.title),
        fold=fold,
    )


def origin_words(chat: Chat, store: ChatStore) -> str:
    """The line under a copied chat's title saying where it came from ("" for none)."""
    link = chat.forked_from
    if link is None:
        return ""
    source = store.get_chat(link.chat_id)
    title = source.title if source is not None else link.title
    gone = source is None or source.deleted_at is not None
    what = "Forked from" if link.kind == "fork" else "Started from the summary of"
    return f"{what} “{_short(title)}”" + (" (deleted)" if gone else "")
