"""`nsa-policy launch [--policy …] [--device …] [--dry-run] -- python -m sglang.launch_server ARGS…`."""
from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, EXIT_USAGE, fail_usage


def register(app: typer.Typer) -> None:
    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def launch(
        ctx: typer.Context,
        policy: str = typer.Option("default", "--policy", help="Bundle name or rule folder."),
        device: str = typer.Option("auto", "--device", help="auto (the local GPU through NVML), a catalog name or a capability spec."),
        model: Optional[str] = typer.Option(None, "--model", help="Model for the policy (catalog id or config.json) when --model-path is not in the catalog."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the final command (shell-quoted, env additions in front) instead of running it."),
        as_json: bool = typer.Option(False, "--json", help="With --dry-run: print one JSON object (argv, env, added flags, decision)."),
        spelling: str = typer.Option("auto", "--spelling", help="Flag/env spelling of the engine: nsa (sglang ≤0.5.10), dsa (later), auto (dsa if the command uses --dsa-* flags)."),
        log_decisions: Optional[str] = typer.Option(None, "--log-decisions", help="Append the decision as one JSON line to this file."),
    ) -> None:
        """Resolve from a server command's flags and the local GPU, add the missing flags, and exec it.

        Everything after `--` is the server command. Exit 1 (and nothing runs) when the policy rejects it.
        """
        import logging

        from nsa_policy.errors import NsaPolicyError, PolicyError
        from nsa_policy.integration.launch import exec_plan, plan_launch
        from nsa_policy.commands._render import render_table

        logger = logging.getLogger("nsa_policy.launch")
        logger.propagate = False  # the decision is printed below; the record only feeds the decision log
        logger.setLevel(logging.INFO)
        if not logger.handlers:
            logger.addHandler(logging.NullHandler())  # else logging's last-resort handler prints warnings twice
        handler = None
        if log_decisions:
            from nsa_policy.integration.decision_log import DecisionLogHandler

            handler = DecisionLogHandler(log_decisions)
            handler.handleError = _raise_log_error  # a CLI should say it could not write the log
            logger.addHandler(handler)
        try:
            plan = plan_launch(ctx.args, policy=policy, device=device, model=model, spelling=spelling, logger=logger)
        except PolicyError as exc:
            print(render_table(exc.decision), file=sys.stderr)
            print(str(exc), file=sys.stderr)
            if as_json:
                print(json.dumps({"rejected": True, "decision": exc.decision.model_dump(mode="json")}))
            raise typer.Exit(EXIT_REJECTED)
        except (NsaPolicyError, _LogWriteError) as exc:
            raise fail_usage(exc, as_json)
        finally:
            if handler is not None:
                logger.removeHandler(handler)
        print(render_table(plan.decision), file=sys.stderr)
        print("nsa-policy launch: " + (("adding " + ", ".join(plan.added_flags)) if plan.added_flags else "no flag to add")
              + "".join(f"; env {k}={v}" for k, v in plan.env_additions.items()), file=sys.stderr)
        for note in plan.notes:
            print(f"nsa-policy launch: note: {note}", file=sys.stderr)
        if dry_run:
            if as_json:
                print(json.dumps({"argv": list(plan.argv), "env": plan.env_additions, "added_flags": list(plan.added_flags),
                                  "command": plan.shell_line(), "decision": plan.decision.model_dump(mode="json")}))
            else:
                print(plan.shell_line())
            raise typer.Exit(EXIT_OK)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            exec_plan(plan)
        except OSError as exc:
            print(f"nsa-policy: error: cannot run {plan.argv[0]!r}: {exc.strerror}", file=sys.stderr)
            raise typer.Exit(EXIT_USAGE)


class _LogWriteError(Exception):
    pass


def _raise_log_error(record) -> None:
    exc = sys.exc_info()[1]
    raise _LogWriteError(f"--log-decisions: {exc}")
