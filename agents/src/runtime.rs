//! One agent at work: its loop and context window, plan mode as a state machine, plan files, subagents.
