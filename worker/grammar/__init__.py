"""Grammar-constrained decoding: compile a GrammarSpec once, then one matcher per request."""
