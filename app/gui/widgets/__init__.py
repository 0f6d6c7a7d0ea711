"""The widgets of the SpecChat window: chat view, messages, Markdown view, composer, conversation list, settings
pane, live graph, Models dialog and small dialogs."""
