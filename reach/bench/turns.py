"""Contestants that stay up and take short turns, side by side: for comparing contestants
whose difference is a few percent on a machine whose speed moves by more than that from one
second to the next.

A round of :func:`~reach.bench.seed_scenario.best_rounds` starts a driver, its agents and
their hosts for each contestant's every turn and measures it alone, for a while: two rounds of
one contestant differ by where their processes fell and by what the machine did meanwhile, by
several percent. Here each contestant's driver starts once a round, sets its agents up and
warms them, then measures a turn each time it is told to (a line ``turn`` or ``turn SECONDS``
on its standard input; its figures are its answer, one line of JSON), until its input ends
(:func:`serve`). The conductor (:func:`side_by_side`) has a reference contestant run beside
each other one, both at once: whatever the machine's speed does, they share it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any

from reach.bench.quiet import settle

#: What a child driver says once its agents are up and warm.
READY = {"ready": True}
#: The line that has a child driver measure one turn.
TURN = "turn"
#: A turn's figures of the whole machine (:func:`~reach.bench.seed_scenario.measure`'s): side
#: by side, they are two contestants' together, and are left out.
MACHINE_FIGURES = ("machine_cpu_us", "processes_cpu_us")


async def serve(measure: Callable[[int, float | None], Awaitable[dict[str, Any]]]) -> None:
    """A child driver's turns: says it is ready, then measures one turn for each line ``turn``
    (``measure(turn, None)``: its set number of messages) or ``turn SECONDS`` (``measure(turn,
    seconds)``: as many as that long allows) on its standard input, printing the figures of
    each as one line of JSON, until its input ends (or says anything else)."""
    print(json.dumps(READY), flush=True)
    turn = 0
    while True:
        word, _, seconds = (await asyncio.to_thread(sys.stdin.readline)).strip().partition(" ")
        if word != TURN:
            return
        print(json.dumps(await measure(turn, float(seconds) if seconds else None)), flush=True)
        turn += 1


class Child:
    """A contestant's child driver, serving turns (:func:`serve`): ``cmd`` started, its
    standard error kept aside to show if it fails."""

    def __init__(self, cmd: list[str]) -> None:
        self.cmd = cmd
        self._err: IO[str] = tempfile.TemporaryFile(  # noqa: SIM115 - closed by end()
            "w+", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, encoding="utf-8")

    def answer(self) -> dict[str, Any]:
        """Its next line of JSON (the lines before it, its progress, passed on as they come).

        Raises:
            subprocess.CalledProcessError: it ended first (what it said on standard error is
                printed and in the error).
        """
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                said: dict[str, Any] = json.loads(line)
                return said
            print(line, end="", flush=True)
        self.proc.wait()
        raise self._failure(None)

    def _failure(self, output: str | None) -> subprocess.CalledProcessError:
        """Prints what it said on standard error; the error saying it, with ``output``."""
        self._err.seek(0)
        err = self._err.read()
        print(err, end="", file=sys.stderr, flush=True)
        return subprocess.CalledProcessError(self.proc.returncode or 1, self.cmd, output, err)

    def begin(self, seconds: float | None = None) -> None:
        """Has it start measuring one turn (of ``seconds``, or of its set number of messages);
        :meth:`answer` gives its figures."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(TURN + ("" if seconds is None else f" {seconds}") + "\n")
        self.proc.stdin.flush()

    def end(self, answered: dict[str, Any] | None = None) -> None:
        """Ends its input (it stops its agents and ends) and waits for it; kills it when it
        has not ended within a minute.

        Raises:
            subprocess.CalledProcessError: with ``answered`` (its last answer, to check), it
                ended in failure (what it said on standard error is printed and in the error).
        """
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):  # ended already
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            if answered is not None and self.proc.returncode != 0:
                raise self._failure(json.dumps(answered))
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._err.close()


def child_command(module: str, name: str, address: str, args: argparse.Namespace,
                  round_: int) -> list[str]:
    """The command that runs ``name``'s child driver of round ``round_`` (``module`` with
    ``--contestant``, serving turns)."""
    return [sys.executable, "-m", module, "--contestant", name, "--address", address,
            "--messages", str(args.messages), "--inflight", str(args.inflight),
            "--round", str(round_)]


async def side_by_side(contestants: Sequence[str], address: str, args: argparse.Namespace, *,
                       module: str, show: Callable[[str, dict[str, Any]], None],
                       ) -> dict[str, Any]:
    """Runs ``args.rounds`` rounds, each a child driver per contestant (started together,
    :func:`child_command`), in which the first contestant (the reference) takes
    ``args.turns`` turns beside each other one: both start at once and run for
    ``args.seconds``, sharing the machine (in alternating order of the others, each pair
    once the machine is quiet). Two contestants running at the same moment run at the same
    speed of the machine, whatever it does from second to second: the reference's msg/s over
    the other's, of the same seconds, says what the other costs (:func:`paired_costs`) far
    more steadily than turns taken apart. ``show`` prints each turn's figures.

    Returns each contestant's turns (``turns``: each turn's figures; the reference's, one
    list per other contestant, ``beside``), the msg/s of all of them (``turns_msgs_per_s``)
    and their median (``median_msgs_per_s``), in the order of ``contestants``.
    """
    reference, others = contestants[0], list(contestants[1:])
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name in others}
    beside: dict[str, list[dict[str, Any]]] = {name: [] for name in others}
    for round_ in range(args.rounds):
        children = {name: Child(child_command(module, name, address, args, round_))
                    for name in contestants}
        try:
            for child in children.values():
                child.answer()  # ready
            for turn in range(args.turns):
                for name in others if turn % 2 == 0 else others[::-1]:  # no fixed first
                    await settle()
                    children[reference].begin(args.seconds)
                    children[name].begin(args.seconds)
                    ours, theirs = children[reference].answer(), children[name].answer()
                    for figures in (ours, theirs):  # the machine's, of both together: neither's
                        for key in MACHINE_FIGURES:
                            figures.pop(key, None)
                    show(f"{reference} #{round_ + 1}.{turn + 1}", ours)
                    show(f"{name} #{round_ + 1}.{turn + 1}", theirs)
                    beside[name].append(ours)
                    turns[name].append(theirs)
        finally:
            for child in children.values():
                child.end()
    results: dict[str, Any] = {reference: {"beside": beside}}
    results.update({name: {"turns": turns[name]} for name in others})
    for name in contestants:
        everything = ([turn for name_ in others for turn in beside[name_]]
                      if name == reference else turns[name])
        rates = [turn["msgs_per_s"] for turn in everything]
        results[name]["turns_msgs_per_s"] = rates
        results[name]["median_msgs_per_s"] = round(statistics.median(rates), 1)
    return results


def paired_costs(values: Sequence[float], off_values: Sequence[float], *,
                 more_is_better: bool = True) -> list[float]:
    """What a contestant costs against ``off`` in each turn (``values`` and ``off_values``, of
    the turns in the order run): 1 less its value over off's of the same turn where more is
    better (msg/s), its value over off's less 1 where less is (CPU per message)."""
    pairs = zip(values, off_values, strict=True)
    if more_is_better:
        return [1 - value / off for value, off in pairs]
    return [value / off - 1 for value, off in pairs]


__all__ = ["MACHINE_FIGURES", "READY", "TURN", "Child", "child_command", "paired_costs", "serve",
           "side_by_side"]
