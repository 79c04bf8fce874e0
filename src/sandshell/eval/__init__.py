"""The task suite and `eval`: task files and their loader (`task`), running a suite in real sandboxes
(`run`), and the summary, its JSON and the comparison of two runs (`report`)."""
