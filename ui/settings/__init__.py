"""The Settings dialog and its pages: providers, local models, programs, tools, memories, health,
trash.
"""
