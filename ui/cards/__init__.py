"""The cards and dividers shown in a chat: approvals, problems, memories, summaries, handoffs, cut
notices.
"""
