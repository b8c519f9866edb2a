"""What the tool list costs an 8K model: every schema sent, against lean mode's tools on demand.

Three MCP servers with 41 tools, modelled on the published reference servers' real tool lists
(names, descriptions and parameters as those servers list them): filesystem (14 tools,
TypeScript, zod-made schemas with ``$schema`` and ``additionalProperties``), fetch (1 tool,
Python, Pydantic-made schemas with a ``title`` on every field) and GitHub (26 tools,
TypeScript). A second set swaps GitHub for git (12 tools, Python): 27 tools.

For each set it prints the tokens each mode sends, as a share of ``budget(8192)`` (the
transcript's budget before any tools):

- ``full``: every tool's spec as sent (``Catalogue.specs``, schema keywords that say nothing
  dropped); ``raw`` is the same before that clean-up;
- ``lean``: lean mode's two small tools (``list_tools``, ``get_tool_schema``);
- ``lean_loaded_max``: lean mode after the model fetched every schema, the largest last (what
  is sent stays capped); ``lean_bound`` is the most lean mode can ever send with these tools
  (the two small tools, plus ``LOADED_TOKENS`` of fetched schemas or the largest one alone);
- ``list_tools_answer``: what ``list_tools``' answer adds to the chat when the model calls it;
- ``sent_by_a_turn_at_8k`` / ``_at_32k`` / ``_at_128k``: the tool list a real chat turn
  (``ApiSession`` with these servers) sent, read from the request: lean at 8K, and wherever
  every schema would take more than ``TOOLS_SHARE`` percent of the budget (``use_lean``:
  these 41 tools at 32K), every schema where they fit in that share (128K).

Goal: lean <= 10% of the budget, full >= 60%. Run: ``python -m bench.tools``; prints one JSON
object on its last line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from bench._common import StandIn
from engines.base import Done, Event, ModelInfo, TextDelta, TurnInput
from engines.context.session import ApiSession
from engines.context.tool_loop import ToolHost
from engines.providers.base import ChatRequest
from engines.tools.catalogue import Catalogue, ServerTool, build_catalogue, tool_spec
from engines.tools.lean import LOADED_TOKENS, answer, lean_for, lean_specs, sent_loaded
from engines.tools.rules import tool_list_tokens
from engines.tools.servers import ToolOutcome
from engines.window import budget, estimate_tokens

WINDOW = 8_192
LEAN_GOAL = 0.10
FULL_GOAL = 0.60

# A parameter: (name, JSON type or a list of enum values, description, required).
Param = tuple[str, str | list[str], str, bool]
ToolDef = tuple[str, str, Sequence[Param]]

_OWNER: Param = ("owner", "string", "Repository owner (username or organization)", True)
_REPO: Param = ("repo", "string", "Repository name", True)
_PULL: Param = ("pull_number", "number", "Pull request number", True)
_TEXT_FILE = (
    "Read the complete contents of a file from the file system as text. Handles various text "
    "encodings and provides detailed error messages if the file cannot be read. Use this tool "
    "when you need to examine the contents of a single file. Use the 'head' parameter to read "
    "only the first N lines of a file, or the 'tail' parameter to read only the last N lines of "
    "a file. Operates on the file as text regardless of extension. Only works within allowed "
    "directories."
)
_LIST_DIR = (
    "Get a detailed listing of all files and directories in a specified path. Results clearly "
    "distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is "
    "essential for understanding directory structure and finding specific files within a "
    "directory. Only works within allowed directories."
)

FILESYSTEM: list[ToolDef] = [
    (
        "read_file",
        "Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.",
        [
            ("path", "string", "", True),
            ("tail", "number", "If provided, returns only the last N lines of the file", False),
            ("head", "number", "If provided, returns only the first N lines of the file", False),
        ],
    ),
    (
        "read_text_file",
        _TEXT_FILE,
        [
            ("path", "string", "", True),
            ("tail", "number", "If provided, returns only the last N lines of the file", False),
            ("head", "number", "If provided, returns only the first N lines of the file", False),
        ],
    ),
    (
        "read_media_file",
        "Read an image or audio file. Returns the base64 encoded data and MIME type. Only works "
        "within allowed directories.",
        [("path", "string", "", True)],
    ),
    (
        "read_multiple_files",
        "Read the contents of multiple files simultaneously. This is more efficient than reading "
        "files one by one when you need to analyze or compare multiple files. Each file's content "
        "is returned with its path as a reference. Failed reads for individual files won't stop "
        "the entire operation. Only works within allowed directories.",
        [
            (
                "paths",
                "array",
                "Array of file paths to read. Each path must be a string pointing to a valid "
                "file within allowed directories.",
                True,
            )
        ],
    ),
    (
        "write_file",
        "Create a new file or completely overwrite an existing file with new content. Use with "
        "caution as it will overwrite existing files without warning. Handles text content with "
        "proper encoding. Only works within allowed directories.",
        [("path", "string", "", True), ("content", "string", "", True)],
    ),
    (
        "edit_file",
        "Make line-based edits to a text file. Each edit replaces exact line sequences with new "
        "content. Returns a git-style diff showing the changes made. Only works within allowed "
        "directories.",
        [
            ("path", "string", "", True),
            ("edits", "edits", "", True),
            ("dryRun", "boolean", "Preview changes using git-style diff format", False),
        ],
    ),
    (
        "create_directory",
        "Create a new directory or ensure a directory exists. Can create multiple nested "
        "directories in one operation. If the directory already exists, this operation will "
        "succeed silently. Perfect for setting up directory structures for projects or ensuring "
        "required paths exist. Only works within allowed directories.",
        [("path", "string", "", True)],
    ),
    ("list_directory", _LIST_DIR, [("path", "string", "", True)]),
    (
        "list_directory_with_sizes",
        _LIST_DIR.replace("specified path.", "specified path, including sizes."),
        [
            ("path", "string", "", True),
            ("sortBy", ["name", "size"], "Sort entries by name or size", False),
        ],
    ),
    (
        "directory_tree",
        "Get a recursive tree view of files and directories as a JSON structure. Each entry "
        "includes 'name', 'type' (file/directory), and 'children' for directories. Files have no "
        "children array, while directories always have a children array (which may be empty). "
        "The output is formatted with 2-space indentation for readability. Only works within "
        "allowed directories.",
        [("path", "string", "", True), ("excludePatterns", "array", "", False)],
    ),
    (
        "move_file",
        "Move or rename files and directories. Can move files between directories and rename "
        "them in a single operation. If the destination exists, the operation will fail. Works "
        "across different directories and can be used for simple renaming within the same "
        "directory. Both source and destination must be within allowed directories.",
        [("source", "string", "", True), ("destination", "string", "", True)],
    ),
    (
        "search_files",
        "Recursively search for files and directories matching a pattern. The patterns should "
        "be glob-style patterns that match paths relative to the working directory. Use pattern "
        "like '*.ext' to match files in current directory, and '**/*.ext' to match files in all "
        "subdirectories. Returns full paths to all matching items. Great for finding files when "
        "you don't know their exact location. Only searches within allowed directories.",
        [
            ("path", "string", "", True),
            ("pattern", "string", "", True),
            ("excludePatterns", "array", "", False),
        ],
    ),
    (
        "get_file_info",
        "Retrieve detailed metadata about a file or directory. Returns comprehensive information "
        "including size, creation time, last modified time, permissions, and type. This tool is "
        "perfect for understanding file characteristics without reading the actual content. "
        "Only works within allowed directories.",
        [("path", "string", "", True)],
    ),
    (
        "list_allowed_directories",
        "Returns the list of directories that this server is allowed to access. Subdirectories "
        "within these allowed directories are also accessible. Use this to understand which "
        "directories and their nested paths are available before trying to access files.",
        [],
    ),
]

FETCH: list[ToolDef] = [
    (
        "fetch",
        "Fetches a URL from the internet and optionally extracts its contents as markdown.\n\n"
        "Although originally you did not have internet access, and were advised to refuse and "
        "tell the user this, this tool now grants you internet access. Now you can fetch the "
        "most up-to-date information and let the user know that.",
        [
            ("url", "string", "URL to fetch", True),
            ("max_length", "integer", "Maximum number of characters to return.", False),
            (
                "start_index",
                "integer",
                "On return output starting at this character index, useful if a previous fetch "
                "was truncated and more context is required.",
                False,
            ),
            (
                "raw",
                "boolean",
                "Get the actual HTML content of the requested page, without simplification.",
                False,
            ),
        ],
    )
]

_PR_SORT = ["created", "updated", "popularity", "long-running"]
GITHUB: list[ToolDef] = [
    (
        "create_or_update_file",
        "Create or update a single file in a GitHub repository",
        [
            _OWNER,
            _REPO,
            ("path", "string", "Path where to create/update the file", True),
            ("content", "string", "Content of the file", True),
            ("message", "string", "Commit message", True),
            ("branch", "string", "Branch to create/update the file in", True),
            (
                "sha",
                "string",
                "SHA of the file being replaced (required when updating existing files)",
                False,
            ),
        ],
    ),
    (
        "search_repositories",
        "Search for GitHub repositories",
        [
            ("query", "string", "Search query (see GitHub search syntax)", True),
            ("page", "number", "Page number for pagination (default: 1)", False),
            ("perPage", "number", "Number of results per page (default: 30, max: 100)", False),
        ],
    ),
    (
        "create_repository",
        "Create a new GitHub repository in your account",
        [
            ("name", "string", "Repository name", True),
            ("description", "string", "Repository description", False),
            ("private", "boolean", "Whether the repository should be private", False),
            ("autoInit", "boolean", "Initialize with README.md", False),
        ],
    ),
    (
        "get_file_contents",
        "Get the contents of a file or directory from a GitHub repository",
        [
            _OWNER,
            _REPO,
            ("path", "string", "Path to the file or directory", True),
            ("branch", "string", "Branch to get contents from", False),
        ],
    ),
    (
        "push_files",
        "Push multiple files to a GitHub repository in a single commit",
        [
            _OWNER,
            _REPO,
            ("branch", "string", "Branch to push to (e.g., 'main' or 'master')", True),
            ("files", "files", "Array of files to push", True),
            ("message", "string", "Commit message", True),
        ],
    ),
    (
        "create_issue",
        "Create a new issue in a GitHub repository",
        [
            ("owner", "string", "", True),
            ("repo", "string", "", True),
            ("title", "string", "", True),
            ("body", "string", "", False),
            ("assignees", "array", "", False),
            ("milestone", "number", "", False),
            ("labels", "array", "", False),
        ],
    ),
    (
        "create_pull_request",
        "Create a new pull request in a GitHub repository",
        [
            _OWNER,
            _REPO,
            ("title", "string", "Pull request title", True),
            ("body", "string", "Pull request body/description", False),
            ("head", "string", "The name of the branch where your changes are implemented", True),
            ("base", "string", "The name of the branch you want the changes pulled into", True),
            ("draft", "boolean", "Whether to create the pull request as a draft", False),
            (
                "maintainer_can_modify",
                "boolean",
                "Whether maintainers can modify the pull request",
                False,
            ),
        ],
    ),
    (
        "fork_repository",
        "Fork a GitHub repository to your account or specified organization",
        [
            _OWNER,
            _REPO,
            (
                "organization",
                "string",
                "Optional: organization to fork to (defaults to your personal account)",
                False,
            ),
        ],
    ),
    (
        "create_branch",
        "Create a new branch in a GitHub repository",
        [
            _OWNER,
            _REPO,
            ("branch", "string", "Name for the new branch", True),
            (
                "from_branch",
                "string",
                "Optional: source branch to create from (defaults to the repository's default "
                "branch)",
                False,
            ),
        ],
    ),
    (
        "list_commits",
        "Get list of commits of a branch in a GitHub repository",
        [
            ("owner", "string", "", True),
            ("repo", "string", "", True),
            ("sha", "string", "", False),
            ("page", "number", "", False),
            ("perPage", "number", "", False),
        ],
    ),
    (
        "list_issues",
        "List issues in a GitHub repository with filtering options",
        [
            ("owner", "string", "", True),
            ("repo", "string", "", True),
            ("direction", ["asc", "desc"], "", False),
            ("labels", "array", "", False),
            ("page", "number", "", False),
            ("per_page", "number", "", False),
            ("since", "string", "", False),
            ("sort", ["created", "updated", "comments"], "", False),
            ("state", ["open", "closed", "all"], "", False),
        ],
    ),
    (
        "update_issue",
        "Update an existing issue in a GitHub repository",
        [
            ("owner", "string", "", True),
            ("repo", "string", "", True),
            ("issue_number", "number", "", True),
            ("title", "string", "", False),
            ("body", "string", "", False),
            ("assignees", "array", "", False),
            ("milestone", "number", "", False),
            ("labels", "array", "", False),
            ("state", ["open", "closed"], "", False),
        ],
    ),
    (
        "add_issue_comment",
        "Add a comment to an existing issue",
        [
            ("owner", "string", "", True),
            ("repo", "string", "", True),
            ("issue_number", "number", "", True),
            ("body", "string", "", True),
        ],
    ),
    (
        "search_code",
        "Search for code across GitHub repositories",
        [
            ("q", "string", "", True),
            ("order", ["asc", "desc"], "", False),
            ("page", "number", "", False),
            ("per_page", "number", "", False),
        ],
    ),
    (
        "search_issues",
        "Search for issues and pull requests across GitHub repositories",
        [
            ("q", "string", "", True),
            (
                "sort",
                [
                    "comments",
                    "reactions",
                    "reactions-+1",
                    "reactions--1",
                    "reactions-smile",
                    "reactions-thinking_face",
                    "reactions-heart",
                    "reactions-tada",
                    "interactions",
                    "created",
                    "updated",
                ],
                "",
                False,
            ),
            ("order", ["asc", "desc"], "", False),
            ("per_page", "number", "", False),
            ("page", "number", "", False),
        ],
    ),
    (
        "search_users",
        "Search for users on GitHub",
        [
            ("q", "string", "", True),
            ("sort", ["followers", "repositories", "joined"], "", False),
            ("order", ["asc", "desc"], "", False),
            ("per_page", "number", "", False),
            ("page", "number", "", False),
        ],
    ),
    (
        "get_issue",
        "Get details of a specific issue in a GitHub repository.",
        [
            ("owner", "string", "", True),
            ("repo", "string", "", True),
            ("issue_number", "number", "", True),
        ],
    ),
    ("get_pull_request", "Get details of a specific pull request", [_OWNER, _REPO, _PULL]),
    (
        "list_pull_requests",
        "List and filter repository pull requests",
        [
            _OWNER,
            _REPO,
            ("state", ["open", "closed", "all"], "State of the pull requests to return", False),
            ("head", "string", "Filter by head user or head organization and branch name", False),
            ("base", "string", "Filter by base branch name", False),
            ("sort", _PR_SORT, "What to sort results by", False),
            ("direction", ["asc", "desc"], "The direction of the sort", False),
            ("per_page", "number", "Results per page (max 100)", False),
            ("page", "number", "Page number of the results", False),
        ],
    ),
    (
        "create_pull_request_review",
        "Create a review on a pull request",
        [
            _OWNER,
            _REPO,
            _PULL,
            ("commit_id", "string", "The SHA of the commit that needs a review", False),
            ("body", "string", "The body text of the review", True),
            (
                "event",
                ["APPROVE", "REQUEST_CHANGES", "COMMENT"],
                "The review action to perform",
                True,
            ),
            ("comments", "review_comments", "Comments to post as part of the review", False),
        ],
    ),
    (
        "merge_pull_request",
        "Merge a pull request",
        [
            _OWNER,
            _REPO,
            _PULL,
            ("commit_title", "string", "Title for the automatic commit message", False),
            (
                "commit_message",
                "string",
                "Extra detail to append to automatic commit message",
                False,
            ),
            ("merge_method", ["merge", "squash", "rebase"], "Merge method to use", False),
        ],
    ),
    (
        "get_pull_request_files",
        "Get the list of files changed in a pull request",
        [_OWNER, _REPO, _PULL],
    ),
    (
        "get_pull_request_status",
        "Get the combined status of all status checks for a pull request",
        [_OWNER, _REPO, _PULL],
    ),
    (
        "update_pull_request_branch",
        "Update a pull request branch with the latest changes from the base branch",
        [
            _OWNER,
            _REPO,
            _PULL,
            (
                "expected_head_sha",
                "string",
                "The expected SHA of the pull request's HEAD ref",
                False,
            ),
        ],
    ),
    (
        "get_pull_request_comments",
        "Get the review comments on a pull request",
        [_OWNER, _REPO, _PULL],
    ),
    ("get_pull_request_reviews", "Get the reviews on a pull request", [_OWNER, _REPO, _PULL]),
]

_REPO_PATH: Param = ("repo_path", "string", "", True)
_TIMESTAMP = (
    "Accepts: ISO 8601 format (e.g., '2024-01-15T14:30:25'), relative dates (e.g., '2 weeks "
    "ago', 'yesterday'), or absolute dates (e.g., '2024-01-15', 'Jan 15 2024')"
)
GIT: list[ToolDef] = [
    ("git_status", "Shows the working tree status", [_REPO_PATH]),
    (
        "git_diff_unstaged",
        "Shows changes in the working directory that are not yet staged",
        [_REPO_PATH, ("context_lines", "integer", "", False)],
    ),
    (
        "git_diff_staged",
        "Shows changes that are staged for commit",
        [_REPO_PATH, ("context_lines", "integer", "", False)],
    ),
    (
        "git_diff",
        "Shows differences between branches or commits",
        [_REPO_PATH, ("target", "string", "", True), ("context_lines", "integer", "", False)],
    ),
    (
        "git_commit",
        "Records changes to the repository",
        [_REPO_PATH, ("message", "string", "", True)],
    ),
    (
        "git_add",
        "Adds file contents to the staging area",
        [_REPO_PATH, ("files", "array", "", True)],
    ),
    ("git_reset", "Unstages all staged changes", [_REPO_PATH]),
    (
        "git_log",
        "Shows the commit logs",
        [
            _REPO_PATH,
            ("max_count", "integer", "", False),
            (
                "start_timestamp",
                "string?",
                f"Start timestamp for filtering commits. {_TIMESTAMP}",
                False,
            ),
            (
                "end_timestamp",
                "string?",
                f"End timestamp for filtering commits. {_TIMESTAMP}",
                False,
            ),
        ],
    ),
    (
        "git_create_branch",
        "Creates a new branch from an optional base branch",
        [_REPO_PATH, ("branch_name", "string", "", True), ("base_branch", "string?", "", False)],
    ),
    ("git_checkout", "Switches branches", [_REPO_PATH, ("branch_name", "string", "", True)]),
    ("git_show", "Shows the contents of a commit", [_REPO_PATH, ("revision", "string", "", True)]),
    (
        "git_branch",
        "List Git branches",
        [
            ("repo_path", "string", "The path to the Git repository.", True),
            (
                "branch_type",
                "string",
                "Whether to list local branches ('local'), remote branches ('remote') or all "
                "branches('all').",
                True,
            ),
            (
                "contains",
                "string?",
                "The commit sha that branch should contain. Do not pass anything to this param "
                "if no commit sha is specified",
                False,
            ),
            (
                "not_contains",
                "string?",
                "The commit sha that branch should NOT contain. Do not pass anything to this "
                "param if no commit sha is specified",
                False,
            ),
        ],
    ),
]


def _property(kind: str | list[str], description: str, pydantic_title: str) -> dict[str, Any]:
    """One parameter's schema, the way zod (TypeScript servers) or Pydantic (Python) write it."""
    if isinstance(kind, list):
        out: dict[str, Any] = {"type": "string", "enum": kind}
    elif kind == "array":
        out = {"type": "array", "items": {"type": "string"}}
    elif kind == "edits":
        out = {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "oldText": {
                        "type": "string",
                        "description": "Text to search for - must match exactly",
                    },
                    "newText": {"type": "string", "description": "Text to replace with"},
                },
                "required": ["oldText", "newText"],
                "additionalProperties": False,
            },
        }
    elif kind == "files":
        out = {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": False,
            },
        }
    elif kind == "review_comments":
        out = {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "The relative path to the file being commented on",
                    },
                    "line": {
                        "type": "number",
                        "description": (
                            "The line number in the file where you want to add a review comment"
                        ),
                    },
                    "body": {"type": "string", "description": "Text of the review comment"},
                },
                "required": ["path", "line", "body"],
                "additionalProperties": False,
            },
        }
    elif kind == "string?":
        out = {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    else:
        out = {"type": kind}
    if description:
        out["description"] = description
    if pydantic_title:
        out["title"] = pydantic_title
    return out


def schema(params: Sequence[Param], *, pydantic: str = "") -> dict[str, Any]:
    """A tool's input schema as its server lists it (``pydantic``: the model's name)."""
    properties = {
        name: _property(kind, description, name.replace("_", " ").title() if pydantic else "")
        for name, kind, description, _required in params
    }
    out: dict[str, Any] = {"type": "object", "properties": properties}
    required = [name for name, _k, _d, req in params if req]
    if required:
        out["required"] = required
    if pydantic:
        out["title"] = pydantic
    else:
        out["additionalProperties"] = False
        out["$schema"] = "http://json-schema.org/draft-07/schema#"
    return out


def server(server_id: str, tools: list[ToolDef], *, python: bool) -> list[ServerTool]:
    return [
        ServerTool(
            server=server_id,
            name=name,
            description=description,
            parameters=schema(
                params, pydantic="".join(p.title() for p in name.split("_")) if python else ""
            ),
        )
        for name, description, params in tools
    ]


def _raw_specs(catalogue: Catalogue) -> list[dict[str, Any]]:
    return [
        {"name": t.call_name, "description": t.description, "parameters": dict(t.parameters)}
        for t in catalogue.tools
    ]


def measure(catalogue: Catalogue) -> dict[str, Any]:
    b = budget(WINDOW)
    full = tool_list_tokens(catalogue.specs())
    raw = tool_list_tokens(_raw_specs(catalogue))
    lean = tool_list_tokens(lean_specs(catalogue))
    # The worst lean list: every tool fetched, largest first; what is sent stays capped.
    by_size = sorted(catalogue.tools, key=lambda t: -tool_list_tokens([tool_spec(t)]))
    loaded = tuple(t.call_name for t in reversed(by_size))
    lean_max = tool_list_tokens(lean_specs(catalogue, loaded))
    largest = max(tool_list_tokens([tool_spec(t)]) for t in catalogue.tools)
    lean_bound = lean + max(LOADED_TOKENS, largest)
    listed = answer(catalogue, "list_tools", {})
    assert listed is not None

    def share(tokens: int) -> float:
        return round(tokens / b, 4)

    return {
        "tools": len(catalogue),
        "budget": b,
        "full_tokens": full,
        "full_share": share(full),
        "raw_tokens": raw,
        "raw_share": share(raw),
        "lean_tokens": lean,
        "lean_share": share(lean),
        "lean_loaded_max_tokens": lean_max,
        "lean_loaded_max_share": share(lean_max),
        "lean_loaded_max_count": len(sent_loaded(catalogue, loaded)),
        "lean_bound_tokens": lean_bound,
        "lean_bound_share": share(lean_bound),
        "list_tools_answer_tokens": estimate_tokens(listed.text),
        "budget_left_full": budget(WINDOW, tools_tokens=full),
        "budget_left_lean": budget(WINDOW, tools_tokens=lean),
    }


class _Recorder(StandIn):
    """A model that answers at once and keeps the tool list each request sent."""

    name = "bench"
    label = "Bench"
    local = False

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], ...]] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.sent.append(request.tools)
        yield TextDelta(text="ok")
        yield Done()


class _Listed:
    """The catalogue's servers, as the tool loop reads them (nothing is run)."""

    def __init__(self, catalogue: Catalogue) -> None:
        self._catalogue = catalogue

    async def catalogue(self, allowed: Collection[str] | None = None) -> Catalogue:
        return self._catalogue

    async def call(
        self,
        catalogue: Catalogue,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        time_limit: float = 0.0,
    ) -> ToolOutcome | None:
        return None


async def _as_sent(catalogue: Catalogue, window: int) -> int:
    """Tokens of the tool list a real chat turn sends on a model with ``window``."""
    recorder = _Recorder()
    session = ApiSession(
        chat_id="bench-tools",
        data_dir=None,
        adapters={recorder.name: recorder},
        tools=ToolHost(_Listed(catalogue)),
    )
    model = ModelInfo(provider=recorder.name, id="m", context=window)
    async for _ in session.turn(TurnInput(chat_id="bench-tools", seq=0, text="Hi", model=model)):
        pass
    return tool_list_tokens(recorder.sent[0])


def main() -> None:
    fs = server("filesystem", FILESYSTEM, python=False)
    fetch = server("fetch", FETCH, python=True)
    github = server("github", GITHUB, python=False)
    git = server("git", GIT, python=True)
    main_set = measure(build_catalogue([("filesystem", fs), ("fetch", fetch), ("github", github)]))
    git_set = measure(build_catalogue([("filesystem", fs), ("fetch", fetch), ("git", git)]))
    catalogue = build_catalogue([("filesystem", fs), ("fetch", fetch), ("github", github)])
    # What a chat turn really sends: lean mode at 8K and wherever every schema would take too
    # much of the budget, every schema where they fit.
    sent_lean = asyncio.run(_as_sent(catalogue, WINDOW))
    sent_32k = asyncio.run(_as_sent(catalogue, 4 * WINDOW))
    sent_full = asyncio.run(_as_sent(catalogue, 16 * WINDOW))
    lean_at_32k = lean_for(4 * WINDOW, catalogue)
    assert sent_lean == main_set["lean_tokens"] and sent_full == main_set["full_tokens"]
    assert sent_32k == main_set["lean_tokens" if lean_at_32k else "full_tokens"]
    result = {
        "window": WINDOW,
        "servers": "filesystem+fetch+github",
        **main_set,
        "sent_by_a_turn_at_8k": sent_lean,
        "sent_by_a_turn_at_32k": sent_32k,
        "sent_by_a_turn_at_128k": sent_full,
        "with_git_instead": {
            k: git_set[k] for k in ("tools", "full_share", "lean_share", "lean_bound_share")
        },
        "lean_goal_met": main_set["lean_bound_share"] <= LEAN_GOAL,
        "full_over_goal": main_set["full_share"] >= FULL_GOAL,
    }
    for name, figures in (("filesystem+fetch+github", main_set), ("filesystem+fetch+git", git_set)):
        print(
            f"{name}: {figures['tools']} tools at {WINDOW:,} (budget {figures['budget']:,}): "
            f"full {figures['full_tokens']:,} tokens ({figures['full_share']:.0%}), "
            f"lean {figures['lean_tokens']:,} ({figures['lean_share']:.1%}), "
            f"lean with fetched schemas at most {figures['lean_bound_tokens']:,} "
            f"({figures['lean_bound_share']:.1%}); list_tools' answer "
            f"{figures['list_tools_answer_tokens']:,} once"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
