"""fif — Failure is Feedback: history-aware backtracking and cost-aware escalation for graph retrieval."""
