"""One chat: its bridge to the conversation, the message list and how it is drawn, the message box,
the model picker.
"""
