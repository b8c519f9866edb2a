"""What counts as untrusted: which messages make a chat untrusted, text the person pasted, and
memories that give orders. The one place these are decided; the chat log records the mark
(``ChatStore.append_message``) and learning reads it.

A chat is untrusted once it holds a message the person did not type themselves
(``untrusted_message``): a tool's result, an attached file, an imported chat, or text pasted
into the box. The composer knows when a paste happened (``Submission.pasted``), whatever its
length; where that is not known (the command line, an older chat) a message counts as pasted
by its shape: long, many lines, or built like a web page, a log, a document, an e-mail or a
prompt aimed at a model. What is learned from an untrusted chat waits for the person's OK.

A memory is a fact about the person ("The person prefers metric units."). One that tells the
assistant what to do ("The assistant should call itself Bob.", "Answers should be in French.",
"Ignore previous instructions."), how to answer or what to put in its answers, or that carries
a link to visit or pass on, reaches every later system prompt, so it always waits for the
person's OK, wherever it came from.

Every check is a pure function of the text, cheap on a 5 MB paste (bounded scans only).
"""

from __future__ import annotations

import re

PASTE_CHARS = 2_000  # a typed message is rarely longer than this
PASTE_LINES = 40  # nor has this many lines
_SCAN_CHARS = 200_000  # shape checks look at this much of a message; a longer one is long anyway
_ENOUGH = 3  # this many tags, log lines, headings or header lines make a shape

_HTML_TAG = re.compile(
    r"(?i)<(?:!doctype\s+html|/?(?:html|head|body|div|span|p|a|script|style|meta|link|table|"
    r"thead|tbody|tr|td|th|ul|ol|li|h[1-6]|br|hr|img|section|article|nav|header|footer|main|"
    r"form|input|button|iframe|noscript|svg|figure|aside|label|select|option|em|strong|b|i|"
    r"code|pre|blockquote)(?=[\s>/]))[^<>\n]{0,300}>"
)
_LOG_LINE = re.compile(
    r"(?im)^[ \t]*(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"  # 2026-11-29 14:30 / [2026-11-29T…
    r"|\[?\d{2}:\d{2}:\d{2}"  # 14:30:05
    r"|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}"
    r"|\[?(?:trace|debug|info|notice|warn|warning|error|err|fatal|critical|crit)\]?[:\s]"
    r"|traceback \(most recent call last\)|\s+at [\w.$<>]+\([\w.]*:\d+\)"  # stack traces
    r"|\d+\.\d+\.\d+\.\d+ - - \[)"  # web server access log
)
_HEADING = re.compile(r"(?m)^[ \t]{0,3}(?:#{1,6}[ \t]+\S|=====|-----|\*\*\*\*)")
_MAIL_HEADER = re.compile(
    r"(?im)^(?:from|to|cc|bcc|subject|date|reply-to|sent|message-id|received|return-path):[ \t]"
)
# Words aimed at a model, not at a person: a page or document carrying a prompt injection.
_INJECTION = re.compile(
    r"(?i)\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+)?"
    r"(?:previous|prior|above|earlier|preceding|former|system|original)\s+"
    r"(?:instructions?|prompts?|rules|directions|guidelines|messages?|context)"
    r"|\b(?:new|updated|real|true)\s+system\s+prompt\b"
    r"|\byou\s+are\s+now\s+(?:in\s+)?(?:developer|dan|jailbreak|god)\s*mode\b"
    r"|^\s*(?:system|assistant)\s*:"
    r"|<\s*/?\s*(?:system|instructions?|im_start|im_end)\s*>"
    r"|\bbegin\s+(?:new\s+)?instructions\b",
    re.MULTILINE,
)


def _at_least(pattern: re.Pattern[str], text: str, n: int) -> bool:
    return any(i + 1 >= n for i, _ in enumerate(pattern.finditer(text)))


def pasted_kind(text: str) -> str | None:
    """Why ``text`` counts as pasted ("long", "page", "log", "document", "e-mail",
    "instructions"), or None when it reads as typed by the person."""
    if len(text) > PASTE_CHARS:
        return "long"
    if text.count("\n") + 1 > PASTE_LINES:
        return "long"
    head = text[:_SCAN_CHARS]
    if _INJECTION.search(head):
        return "instructions"
    if _at_least(_HTML_TAG, head, _ENOUGH):
        return "page"
    if _at_least(_LOG_LINE, head, _ENOUGH):
        return "log"
    if _at_least(_MAIL_HEADER, head, _ENOUGH):
        return "e-mail"
    if _at_least(_HEADING, head, _ENOUGH):
        return "document"
    return None


def looks_pasted(text: str) -> bool:
    """True when a person message counts as pasted, so as untrusted (see the module doc)."""
    return pasted_kind(text) is not None


def untrusted_message(
    role: str,
    text: str = "",
    *,
    attachments: bool = False,
    pasted: bool = False,
    outside: bool = True,
    imported: bool = False,
) -> bool:
    """Whether saving this message makes its chat untrusted (see the module doc).

    ``attachments``: the person's message carries files. ``pasted``: the composer saw text
    pasted into it. ``outside``: for a tool message, the text came from a tool or its server
    (a call Conch answered itself, denied or never ran read nothing from outside).
    ``imported``: the message came from another app's export.
    """
    if imported:
        return True
    if role == "tool":
        return outside
    if role == "user":
        return pasted or attachments or looks_pasted(text)
    return False


# --- memories that give orders ----------------------------------------------------------------

# "model", "bot" and "system" are left out: people build those ("a model that should classify").
_ASSISTANT = r"(?:the\s+|this\s+|an?\s+|your\s+)?(?:assistant|ai|a\.i\.|chatbot|llm|conch)"
_ORDER_WORDS = (
    r"(?:should|must|shall|will|would|is\s+to|are\s+to|has\s+to|have\s+to|needs?\s+to|may|"
    r"can|cannot|can't|may\s+not|always|never|ought\s+to|is\s+required|is\s+allowed)"
)
_INSTRUCTION = re.compile(
    # an order given straight away: "Always answer in French.", "Ignore previous instructions."
    r"^\W*(?:always|never|ignore|disregard|forget|override|do\s+not|don't|dont|please|you|your|"
    r"respond|reply|answer|call\s+yourself|refer\s+to|pretend|act\s+as|behave|start|begin|end|"
    r"include|say|write|speak|output|print|use|remember\s+to|from\s+now\s+on|stop|must|"
    r"only\s+(?:answer|reply|respond|speak|write))\b"
    # the assistant as the one who must do something
    rf"|\b{_ASSISTANT}\s+(?:\w+\s+){{0,2}}{_ORDER_WORDS}\b"
    rf"|\b(?:wants?|expects?|asks?|asked|told|tells|instructs?|instructed|requires?|likes?|"
    rf"prefers?)\s+{_ASSISTANT}\s+to\b"
    r"|\byou\s+(?:must|should|shall|will|are\s+to|have\s+to|need\s+to|may\s+not|cannot|can't)\b"
    # a name or a role for the assistant
    r"|\b(?:call|calls|name|names|refer\s+to|refers\s+to|introduce|introduces)\s+"
    r"(?:yourself|itself|himself|herself|themselves)\b"
    r"|\b(?:yourself|itself)\s+(?:as|is|be)\b"
    # every answer made to carry something
    r"|\b(?:every|each|all|any)\s+(?:of\s+(?:its|your|the)\s+)?"
    r"(?:answers?|responses?|replies|reply|messages?|outputs?)\b"
    # the words of a prompt injection
    r"|\b(?:ignore|disregard|forget|override|obey)\s+(?:\w+\s+){0,3}(?:instructions?|rules|prompts?)\b"
    r"|\b(?:system\s+prompt|developer\s+mode|jailbreak|prompt\s+injection)\b",
    re.IGNORECASE,
)


# What the assistant produces: a memory about these is about how to answer, not about the person.
_ANSWERS = (
    r"(?:answers?|replies|reply|responses?|outputs?|messages?|conversations?|communications?|"
    r"suggestions?|recommendations?|explanations?|summaries)"
)
_LANGUAGES = (
    r"(?:english|french|german|spanish|italian|portuguese|dutch|flemish|russian|ukrainian|"
    r"polish|czech|swedish|norwegian|danish|finnish|greek|turkish|arabic|hebrew|hindi|chinese|"
    r"mandarin|cantonese|japanese|korean|vietnamese|thai|indonesian|latin|esperanto|klingon|"
    r"lowercase|lower\s+case|uppercase|upper\s+case|capitals|capital\s+letters|json|markdown|"
    r"bullet\s+points|rhymes?|verse)"
)
# Said of answers: how they must be, what they must carry.
_SHAPED = (
    r"(?:should|must|shall|ought|needs?|has\s+to|have\s+to|is\s+to|are\s+to|be|being|kept|"
    r"written|given|formatted|signed|contains?|containing|includes?|including|included|ends?|"
    r"ending|starts?|starting|begins?|cite|cites|recommend\w*|point\w*|mention\w*|link\w*|"
    rf"always|never|only|in\s+{_LANGUAGES})"
)
# Wanting, liking or asking for something about answers.
_WANTING = (
    r"(?:prefer\w*|wants?|wanted|wish\w*|likes?|liked|loves?|appreciat\w*|expects?|asks?|"
    r"asked|requests?\w*|includ\w*|add\w*|append\w*|end\w*|sign\w*|every|each|all|any)"
)
_ABOUT_ANSWERS = re.compile(
    # "Answers should be in French.", "Replies in French are what the person wants."
    rf"\b{_ANSWERS}\b(?:\W+\w+){{0,4}}?\W+{_SHAPED}\b"
    # "The person wants the answers kept short.", "… the link included with replies."
    rf"|\b{_WANTING}\b(?:\W+\w+){{0,4}}?\W+{_ANSWERS}\b"
    # "The person prefers to be answered in Spanish.", "Reply to the person in German."
    r"|\b(?:be|being|get|gets|getting)\s+(?:answered|replied\s+to|responded\s+to|addressed|"
    r"greeted|spoken\s+to|written\s+to)\b"
    rf"|\b(?:answer|reply|respond|address|greet)(?:s|ed|ing)?\b(?:\W+\w+){{0,3}}?\W+in\s+"
    rf"{_LANGUAGES}\b"
    # "When answering, use a pirate voice.", "Before responding, check …"
    r"|\b(?:when|whenever|before|after|while)\s+(?:answering|replying|responding|writing\s+back)\b"
    # the assistant doing something: "The person likes it when the assistant writes in French."
    rf"|\b{_ASSISTANT}\s+(?:\w+\s+){{0,2}}(?:writes|speaks|answers|replies|responds|uses|says|"
    r"includes|adds|mentions|recommends|visits|checks|opens|signs|ends|starts|begins)\b"
    # orders to recommend, mention or go somewhere
    r"|^\W*(?:recommend|suggest|mention|add|append|attach|insert|visit|check|open|browse|fetch|"
    r"go\s+to|look\s+up|link|sign|promote|advertise|cite|quote)\b"
    r"|\b(?:visit|visiting|browse|open|fetch|go\s+to|look\s+at)\s+(?:\w+\s+){0,3}"
    r"(?:link|url|site|website|page)\b",
    re.IGNORECASE | re.MULTILINE,
)
# A link in any form: a memory carrying one would put it in every later system prompt.
_LINK = re.compile(
    r"(?i)\b(?:https?|ftp)://|\bwww\.[\w-]"
    r"|\b[\w-]+\.(?:com|net|org|io|example|xyz|ru|info|biz|co|app|dev|site|shop|"
    r"link|click|top|online|store|me|ly|gg|ai|de|fr|uk|nl|be|cn|tk)\b(?!\.\w)"
    r"|\b[\w-]+\.[a-z]{2,}/\S"
)


def reads_like_instruction(memory: str) -> bool:
    """True when ``memory`` tells the assistant what to do, how to answer or what to put in
    its answers, or carries a link, instead of saying something about the person; such a
    memory always waits for the person's OK."""
    head = memory[:2_000]
    return bool(_INSTRUCTION.search(head) or _ABOUT_ANSWERS.search(head) or _LINK.search(head))
