"""Programs written for the Claude Agent SDK (Python), run unchanged against muster.

orchestrator/tests/suite/claude_sdk.rs starts this script with the SDK's venv python:
`scenarios.py SCENARIO CLI_PATH CWD`, CLI_PATH a `claude` link to muster, the model server and
its key in the environment (ANTHROPIC_API_KEY and CLAUDE_* unset). Each scenario asserts what
the SDK parsed and prints one JSON line of what the Rust side checks in the store; any failed
assertion exits non-zero. Every scenario asserts `muster_version` in `system`/`init`, so the
SDK's bundled real CLI could never pass for muster.
"""

import asyncio
import json
import os
import sys
from pathlib import Path

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultAllow,
    PermissionUpdate,
    ResultMessage,
    SystemMessage,
    TextBlock,
    query,
)
from claude_agent_sdk.types import PermissionRuleValue


def options(cli: str, cwd: str, **extra) -> ClaudeAgentOptions:
    return ClaudeAgentOptions(cli_path=cli, cwd=cwd, **extra)


def check_init(message: SystemMessage) -> None:
    assert message.data.get("muster_version"), f"no muster_version in init: {message.data}"
    assert message.data["claude_code_version"].startswith("2."), message.data


def texts(messages) -> list:
    return [
        block.text
        for message in messages
        if isinstance(message, AssistantMessage)
        for block in message.content
        if isinstance(block, TextBlock)
    ]


async def collect(stream) -> list:
    return [message async for message in stream]


def result_of(messages) -> ResultMessage:
    results = [m for m in messages if isinstance(m, ResultMessage)]
    assert results, f"no ResultMessage in {messages}"
    return results[-1]


def inits(messages) -> list:
    found = [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init"]
    for message in found:
        check_init(message)
    assert found, f"no init in {messages}"
    return found


async def query_plan(cli: str, cwd: str) -> dict:
    """`query("…")` with a string prompt in plan mode: the plan comes to can_use_tool as
    ExitPlanMode; approving it into acceptEdits lets the run finish."""
    asked = []

    async def can_use_tool(tool_name, tool_input, context):
        asked.append({"tool": tool_name, "input": tool_input, "agent": context.agent_id})
        return PermissionResultAllow(
            updated_input=tool_input,
            updated_permissions=[PermissionUpdate(type="setMode", mode="acceptEdits")],
        )

    messages = await collect(
        query(
            prompt="Plan, then write out.txt.",
            options=options(cli, cwd, permission_mode="plan", can_use_tool=can_use_tool),
        )
    )
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and not result.is_error, result
    assert result.result == "Done as planned.", result
    assert result.total_cost_usd is not None and result.total_cost_usd > 0, result
    assert result.usage["input_tokens"] > 0 and result.usage["output_tokens"] > 0, result
    assert [a["tool"] for a in asked] == ["ExitPlanMode"], asked
    assert asked[0]["input"]["plan"].startswith("## Goal"), asked
    assert asked[0]["agent"] == "main", asked
    assert (Path(cwd) / "out.txt").read_text() == "out\n"
    return {"session_id": result.session_id, "cost": result.total_cost_usd,
            "usage": result.usage, "request_id": asked[0]["input"].get("request_id")}


async def query_team(cli: str, cwd: str) -> dict:
    """`query("…")` with a string prompt in a team run: the teammate's plan arrives after the
    lead's turn, comes to can_use_tool as ExitPlanMode from agent `alice`, and its approval
    completes the run."""
    asked = []

    async def can_use_tool(tool_name, tool_input, context):
        asked.append({"tool": tool_name, "agent": context.agent_id})
        return PermissionResultAllow(
            updated_permissions=[PermissionUpdate(type="setMode", mode="acceptEdits")],
        )

    messages = await collect(
        query(prompt="Greet the world.", options=options(cli, cwd, can_use_tool=can_use_tool))
    )
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and not result.is_error, result
    assert result.total_cost_usd is not None and result.usage["output_tokens"] > 0, result
    assert asked == [{"tool": "ExitPlanMode", "agent": "alice"}], asked
    assert (Path(cwd) / "hello.txt").read_text() == "hello, world\n"
    return {"session_id": result.session_id}


async def client_two_prompts(cli: str, cwd: str) -> dict:
    """A ClaudeSDKClient sends two prompts in one process; the second continues the run."""
    async with ClaudeSDKClient(options=options(cli, cwd)) as client:
        await client.query("First question.")
        first = await collect(client.receive_response())
        await client.query("Second question.")
        second = await collect(client.receive_response())
    inits(first)
    inits(second)
    one, two = result_of(first), result_of(second)
    assert one.result == "First answer." and two.result == "Second answer.", (one, two)
    assert one.session_id == two.session_id, (one, two)
    assert texts(first) == ["First answer."], texts(first)
    return {"session_id": one.session_id}


async def interrupt(cli: str, cwd: str) -> dict:
    """interrupt() ends a turn the model server holds; the next query continues the run."""
    reached = Path(cwd) / "gate-reached"
    async with ClaudeSDKClient(options=options(cli, cwd)) as client:
        await client.query("Wait.")
        # The Rust side creates the file once the model request waits at the gate.
        while not reached.exists():
            await asyncio.sleep(0.05)
        await client.interrupt()
        first = await collect(client.receive_response())
        await client.query("Go on.")
        second = await collect(client.receive_response())
    inits(first)
    stopped = result_of(first)
    assert stopped.is_error and stopped.subtype == "error_during_execution", stopped
    done = result_of(second)
    assert done.subtype == "success" and done.result == "After the interrupt.", done
    return {"session_id": done.session_id}


async def team_interrupt_continue_resume(cli: str, cwd: str) -> dict:
    """In a team project: interrupt() ends the lead's held turn and the next query continues
    the team run; a later process resumes it by its session id (`resume=`), and another
    continues the newest run (`continue_conversation=True`): one team run throughout."""
    reached = Path(cwd) / "gate-reached"
    async with ClaudeSDKClient(options=options(cli, cwd)) as client:
        await client.query("Greet the world.")
        while not reached.exists():
            await asyncio.sleep(0.05)
        await client.interrupt()
        first = await collect(client.receive_response())
        await client.query("Go on.")
        second = await collect(client.receive_response())
    inits(first)
    stopped = result_of(first)
    assert stopped.is_error and stopped.subtype == "error_during_execution", stopped
    went_on = result_of(second)
    assert went_on.subtype == "success" and went_on.result == "Answered.", went_on
    session = went_on.session_id
    assert stopped.session_id == session, (stopped, went_on)
    resumed = await collect(
        query(prompt="Resumed question.", options=options(cli, cwd, resume=session))
    )
    inits(resumed)
    again = result_of(resumed)
    assert again.subtype == "success" and again.session_id == session, again
    continued = await collect(
        query(prompt="Continued question.",
              options=options(cli, cwd, continue_conversation=True))
    )
    inits(continued)
    last = result_of(continued)
    assert last.subtype == "success" and last.session_id == session, last
    return {"session_id": session}


async def merge_review(cli: str, cwd: str) -> dict:
    """A teammate's merge for the person comes to can_use_tool as ReviewMerge, with the diff
    it adds; allowing it approves the merge, which lands in the tree, and the run succeeds."""
    asked = []

    async def can_use_tool(tool_name, tool_input, context):
        asked.append({"tool": tool_name, "input": tool_input, "agent": context.agent_id})
        return PermissionResultAllow()

    messages = await collect(
        query(prompt="Build it.", options=options(cli, cwd, can_use_tool=can_use_tool))
    )
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and not result.is_error, result
    assert [a["tool"] for a in asked] == ["ReviewMerge"], asked
    review = asked[0]
    assert review["agent"] == "one", review
    assert review["input"]["files"] == ["one.txt"], review
    assert "+one" in review["input"]["diff"], review
    assert (Path(cwd) / "one.txt").read_text() == "one\n"
    return {"session_id": result.session_id, "request_id": review["input"]["request_id"]}


async def set_model_and_mode(cli: str, cwd: str) -> dict:
    """set_model and set_permission_mode between two queries: the second query runs on that
    model, in acceptEdits, so its edit runs without asking."""
    async with ClaudeSDKClient(options=options(cli, cwd)) as client:
        await client.query("First question.")
        first = await collect(client.receive_response())
        await client.set_model("claude-opus-4-5")
        await client.set_permission_mode("acceptEdits")
        await client.query("Write out.txt.")
        second = await collect(client.receive_response())
    inits(first)
    init = inits(second)[-1]
    assert init.data["model"] == "claude-opus-4-5", init.data
    assert init.data["permissionMode"] == "acceptEdits", init.data
    done = result_of(second)
    assert done.subtype == "success" and done.result == "Written.", done
    assert (Path(cwd) / "out.txt").read_text() == "out\n"
    return {"session_id": done.session_id}


NO_SHELL = "No shell in this project: use Glob to list files."


async def hook_callbacks(cli: str, cwd: str) -> dict:
    """Hook callbacks registered with `hooks=`: a PreToolUse callback denies Bash with a reason
    (the model reads it), another allows every Write — which narrows nothing: the mode's ask
    still reaches can_use_tool — and a PostToolUse callback sees each call that ran."""
    pre, post, asked = [], [], []

    async def deny_bash(hook_input, tool_use_id, context):
        pre.append({"tool": hook_input["tool_name"], "id": tool_use_id,
                    "event": hook_input["hook_event_name"],
                    "input": hook_input["tool_input"]})
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "deny",
                                       "permissionDecisionReason": NO_SHELL}}

    async def allow_writes(hook_input, tool_use_id, context):
        pre.append({"tool": hook_input["tool_name"], "id": tool_use_id,
                    "event": hook_input["hook_event_name"]})
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "allow"}}

    async def saw_call(hook_input, tool_use_id, context):
        post.append({"tool": hook_input["tool_name"], "id": tool_use_id,
                     "event": hook_input["hook_event_name"],
                     "response": hook_input.get("tool_response")})
        return {}

    async def can_use_tool(tool_name, tool_input, context):
        asked.append(tool_name)
        return PermissionResultAllow()

    hooks = {
        "PreToolUse": [HookMatcher(matcher="Bash", hooks=[deny_bash]),
                       HookMatcher(matcher="Write", hooks=[allow_writes])],
        "PostToolUse": [HookMatcher(hooks=[saw_call])],
    }
    messages = await collect(
        query(prompt="Look around, then write out.txt.",
              options=options(cli, cwd, hooks=hooks, can_use_tool=can_use_tool))
    )
    init = inits(messages)[-1]
    result = result_of(messages)
    assert result.subtype == "success" and result.result == "Done.", result
    assert [(p["tool"], p["event"]) for p in pre] == [
        ("Bash", "PreToolUse"), ("Write", "PreToolUse")], pre
    assert pre[0]["input"] == {"command": "ls"}, pre
    # The callback's allow did not turn the mode's ask into an allow.
    assert asked == ["Write"], asked
    assert [(p["tool"], p["event"]) for p in post] == [
        ("Write", "PostToolUse"), ("Glob", "PostToolUse")], post
    assert all(p["id"] for p in pre + post), (pre, post)
    assert pre[1]["id"] == post[0]["id"], (pre, post)
    assert (Path(cwd) / "out.txt").read_text() == "out\n"
    return {"session_id": result.session_id, "init_session": init.data["session_id"],
            "bash_id": pre[0]["id"], "glob_response": post[1]["response"]}


async def callback_updated_input(cli: str, cwd: str) -> dict:
    """A PreToolUse callback allows a Write with an updatedInput aimed at a file a deny rule
    protects: the engine decides the changed input again, and the deny rule holds."""
    seen = []

    async def redirect(hook_input, tool_use_id, context):
        seen.append(hook_input["tool_input"]["file_path"])
        changed = dict(hook_input["tool_input"], file_path="secret.txt")
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "allow",
                                       "updatedInput": changed}}

    hooks = {"PreToolUse": [HookMatcher(matcher="Write", hooks=[redirect])]}
    messages = await collect(
        query(prompt="Write out.txt.",
              options=options(cli, cwd, hooks=hooks, permission_mode="acceptEdits",
                              disallowed_tools=["Write(/secret.txt)"]))
    )
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and result.result == "Refused, then.", result
    assert seen == ["out.txt"], seen
    assert not (Path(cwd) / "secret.txt").exists()
    assert not (Path(cwd) / "out.txt").exists()
    return {"session_id": result.session_id}


async def failing_callbacks(cli: str, cwd: str) -> dict:
    """A callback that raises under on_failure="block" refuses its call; one that answers
    too late (past its matcher's timeout) is cancelled and, under the default "continue",
    decides nothing: its call runs."""
    cancelled = []

    async def broken(hook_input, tool_use_id, context):
        raise RuntimeError("the guard's database is down")

    async def slow(hook_input, tool_use_id, context):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(hook_input["tool_name"])
            raise
        return {}

    hooks = {"PreToolUse": [
        HookMatcher(matcher="Bash", hooks=[broken], on_failure="block"),
        HookMatcher(matcher="Glob", hooks=[slow], timeout=0.5),
    ]}
    messages = await collect(
        query(prompt="Look around.",
              options=options(cli, cwd, hooks=hooks, permission_mode="acceptEdits"))
    )
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and result.result == "Looked.", result
    return {"session_id": result.session_id, "cancelled": cancelled}


async def team_answer_after_the_stop(cli: str, cwd: str) -> dict:
    """A teammate's Write deferred to the person by a hook callback reaches can_use_tool; the
    program answers only once the team run has stopped awaiting that decision (read in the
    store), and the prompt still carries the run on to its end with that answer."""
    import sqlite3

    asked, run = [], {}

    async def defer_teammates_writes(hook_input, tool_use_id, context):
        if hook_input.get("agent_id") != "one":
            return {}
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "defer",
                                       "permissionDecisionReason": "a person decides"}}

    def status() -> str:
        with sqlite3.connect(Path(cwd) / ".muster" / "muster.db") as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run["id"],)).fetchone()
        return row[0] if row else ""

    async def can_use_tool(tool_name, tool_input, context):
        asked.append({"tool": tool_name, "agent": context.agent_id})
        for _ in range(600):  # a guard of 30 s against a run that never stops
            if status() == "awaiting_decision":
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the run never stopped awaiting the decision")
        return PermissionResultAllow()

    hooks = {"PreToolUse": [HookMatcher(matcher="Write", hooks=[defer_teammates_writes])]}
    messages = []
    async for message in query(prompt="Build it.",
                               options=options(cli, cwd, hooks=hooks,
                                               can_use_tool=can_use_tool)):
        if isinstance(message, SystemMessage) and message.subtype == "init":
            run["id"] = message.data["muster_run_id"]
        messages.append(message)
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and not result.is_error, result
    assert asked == [{"tool": "Write", "agent": "one"}], asked
    assert (Path(cwd) / "one.txt").read_text() == "one\n"
    return {"session_id": result.session_id}


async def session_rules(cli: str, cwd: str) -> dict:
    """An `addRules` in can_use_tool's answer aimed at the project's settings file: no file is
    written, the rule applies to the session at once (the next matching call is not asked),
    and muster says so in one warning on stderr."""
    asked, stderr = [], []

    async def can_use_tool(tool_name, tool_input, context):
        asked.append(tool_input.get("command"))
        return PermissionResultAllow(updated_permissions=[PermissionUpdate(
            type="addRules", behavior="allow", destination="projectSettings",
            rules=[PermissionRuleValue(tool_name="Bash", rule_content="touch:*")])])

    messages = await collect(
        query(prompt="Touch two files.",
              options=options(cli, cwd, can_use_tool=can_use_tool, stderr=stderr.append))
    )
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and result.result == "Touched.", result
    assert asked == ["touch a.txt"], asked
    assert (Path(cwd) / "a.txt").exists() and (Path(cwd) / "b.txt").exists()
    for name in ("settings.json", "settings.local.json"):
        assert not (Path(cwd) / ".claude" / name).exists(), name
    warnings = [line for line in stderr if "updatedPermissions" in line]
    assert len(warnings) == 1 and "projectSettings" in warnings[0], stderr
    return {"session_id": result.session_id, "warning": warnings[0]}


async def mode_mid_turn(cli: str, cwd: str) -> dict:
    """set_permission_mode while a turn runs (here from inside can_use_tool, answering the
    turn's first Write): the turn's next tool call is decided in acceptEdits, so the second
    Write is not asked about."""
    asked = []
    client = ClaudeSDKClient(options=options(cli, cwd))

    async def can_use_tool(tool_name, tool_input, context):
        asked.append(tool_input.get("file_path"))
        await client.set_permission_mode("acceptEdits")
        return PermissionResultAllow()

    client.options.can_use_tool = can_use_tool
    async with client:
        await client.query("Write two files.")
        messages = await collect(client.receive_response())
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "success" and result.result == "Written.", result
    assert asked == ["a.txt"], asked
    assert (Path(cwd) / "a.txt").read_text() == "a\n"
    assert (Path(cwd) / "b.txt").read_text() == "b\n"
    return {"session_id": result.session_id}


async def budget(cli: str, cwd: str) -> dict:
    """A run over its --max-budget-usd ends error_max_budget_usd; the SDK raises after it."""
    messages = []
    raised = None
    try:
        async for message in query(
            prompt="Work.",
            options=options(cli, cwd, max_budget_usd=1.0, model="claude-sonnet-4-5"),
        ):
            messages.append(message)
    except Exception as error:  # noqa: BLE001 - the SDK's error for a non-zero exit
        raised = error
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "error_max_budget_usd" and result.is_error, result
    assert raised is not None and getattr(raised, "exit_code", None) == 3, repr(raised)
    return {"session_id": result.session_id, "raised": str(raised)}


async def awaiting(cli: str, cwd: str) -> dict:
    """A plan with no can_use_tool awaits a person: error_awaiting_decision, and the SDK
    raises with the result's text."""
    messages = []
    raised = None
    try:
        async for message in query(
            prompt="Plan it.", options=options(cli, cwd, permission_mode="plan")
        ):
            messages.append(message)
    except Exception as error:  # noqa: BLE001 - the SDK's error for a non-zero exit
        raised = error
    inits(messages)
    result = result_of(messages)
    assert result.subtype == "error_awaiting_decision" and result.is_error, result
    assert raised is not None, "the SDK did not raise"
    assert "muster approve" in str(raised), str(raised)
    assert getattr(raised, "exit_code", None) == 5, repr(raised)
    return {"session_id": result.session_id, "raised": str(raised)}


SCENARIOS = {
    "query_plan": query_plan,
    "query_team": query_team,
    "client_two_prompts": client_two_prompts,
    "interrupt": interrupt,
    "team_interrupt_continue_resume": team_interrupt_continue_resume,
    "merge_review": merge_review,
    "set_model_and_mode": set_model_and_mode,
    "budget": budget,
    "awaiting": awaiting,
    "hook_callbacks": hook_callbacks,
    "session_rules": session_rules,
    "team_answer_after_the_stop": team_answer_after_the_stop,
    "failing_callbacks": failing_callbacks,
    "callback_updated_input": callback_updated_input,
    "mode_mid_turn": mode_mid_turn,
}


def main() -> None:
    scenario, cli, cwd = sys.argv[1:4]
    for name in os.environ:
        assert not name.startswith("CLAUDE_") and name != "ANTHROPIC_API_KEY", name
    outcome = asyncio.run(SCENARIOS[scenario](cli, cwd))
    print(json.dumps(outcome, default=str), flush=True)


if __name__ == "__main__":
    main()
