"""The chaos test's own checks, on made-up answers and streams: each invariant catches what it names and passes
what is allowed (a 503, a cancel of an ended response), and one seed draws one sequence of faults."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from app.testing.chaos_checks import answer_violations, cancel_violations, stream_defects
from app.testing.chaos_cluster import ChaosCluster, Clock, Timeline
from app.testing.chaos_faults import FAULT_KINDS, FaultInjector, FaultPlan
from app.testing.chaos_load import Answer, Recorder, Tracked

OPENAI_ERROR = '{"error": {"message": "down", "type": "server_error", "param": null, "code": "unavailable"}}'


def stream(count: int, terminal: str = "response.completed") -> list[dict[str, Any]]:
    response = {"id": "resp_1", "status": "completed"}
    events: list[dict[str, Any]] = [{"type": "response.created", "sequence_number": 0, "response": response}]
    events += [{"type": "response.output_text.delta", "sequence_number": n, "delta": "x"} for n in range(1, count)]
    events.append({"type": terminal, "sequence_number": count, "response": response})
    return events


def test_a_whole_stream_numbered_once_with_its_terminal_event_last_has_no_defect() -> None:
    assert stream_defects(stream(5), whole=True) == []
    assert stream_defects(stream(5)[:3], whole=False) == []  # a foreground stream whose node died


def test_a_duplicated_or_missing_event_and_a_second_terminal_event_are_defects() -> None:
    events = stream(5)
    duplicated = [*events[:3], events[2], *events[3:]]
    assert "duplicated [2]" in stream_defects(duplicated, whole=True)[0]
    assert "missing [2]" in stream_defects(events[:2] + events[3:], whole=True)[0]
    twice = [*events, {**events[-1], "sequence_number": len(events)}]
    assert stream_defects(twice, whole=True) == [f"terminal events at [5, 6] of {len(twice)}"]
    assert stream_defects(stream(5)[:-1], whole=True) == ["terminal events at [] of 5"]


def answers(*made: Answer) -> Recorder:
    recorder = Recorder(Clock())
    for answer in made:
        recorder.answer(answer)
    return recorder


def answer(status: int | None, body: str = "", path: str = "/v1/responses", error: str | None = None) -> Answer:
    return Answer(1.0, 0, "op", "POST", path, 0, status, error=error, body=body)


def test_a_503_is_allowed_and_any_other_5xx_is_a_server_error() -> None:
    assert answer_violations(answers(answer(503, OPENAI_ERROR), answer(200))) == []
    found = answer_violations(answers(answer(500, OPENAI_ERROR), answer(502, "<html>bad gateway</html>")))
    assert [violation.invariant for violation in found] == ["server_error", "server_error", "error_shape"]


def test_only_a_429_and_a_cancel_of_an_ended_response_are_expected_4xx() -> None:
    ended = '{"error": {"message": "Cannot cancel a completed response.", "type": "invalid_request_error", '
    ended += '"param": "response_id", "code": "invalid_value"}}'
    allowed = answers(answer(429, OPENAI_ERROR), answer(400, ended, path="/v1/responses/resp_1/cancel"))
    assert answer_violations(allowed) == []
    found = answer_violations(answers(answer(404, OPENAI_ERROR, path="/v1/responses/resp_1")))
    assert [violation.invariant for violation in found] == ["unexpected_client_error"]


def test_a_request_that_timed_out_is_a_violation_and_a_refused_connection_is_not() -> None:
    found = answer_violations(answers(answer(None, error="ReadTimeout"), answer(None, error="ConnectError")))
    assert [violation.invariant for violation in found] == ["request_timed_out"]


def cancelled(status: int, reply: dict[str, Any]) -> Tracked:
    return Tracked("resp_1", "cancel", True, False, 1.0, cancel_status=status, cancel_reply=reply)


def test_an_acknowledged_cancel_must_end_the_response_as_its_answer_said() -> None:
    stopped = {"id": "resp_1", "status": "cancelled", "output": []}
    assert cancel_violations(cancelled(200, stopped), stopped) == []
    assert cancel_violations(cancelled(200, {"status": "in_progress"}), stopped) == []
    completed = {"id": "resp_1", "status": "completed", "output": []}
    assert [v.invariant for v in cancel_violations(cancelled(200, stopped), completed)] == ["cancel_lost"]
    assert [v.invariant for v in cancel_violations(cancelled(200, {"status": "queued"}), completed)] == ["cancel_lost"]
    # The output grew after the cancel answered: lost too.
    grown = {**stopped, "output": [{"type": "message"}]}
    assert [v.invariant for v in cancel_violations(cancelled(200, stopped), grown)] == ["cancel_lost"]


def test_a_cancel_refused_because_the_response_had_ended_is_not_lost() -> None:
    completed = {"id": "resp_1", "status": "completed"}
    assert cancel_violations(cancelled(400, {"error": {}}), completed) == []
    refused = cancel_violations(cancelled(400, {"error": {}}), {"id": "resp_1", "status": "cancelled"})
    assert [v.invariant for v in refused] == ["cancel_lost"]
    unanswered = cancelled(200, {})
    unanswered.cancel_answered = False
    assert [v.invariant for v in cancel_violations(unanswered, completed)] == ["cancel_lost"]


def injector(seed: int, plan: FaultPlan | None = None) -> FaultInjector:
    workers = [SimpleNamespace(log_path=Path(f"/nonexistent/worker_{index}-0.log")) for index in range(2)]
    apis = [SimpleNamespace(log_path=Path(f"/nonexistent/api_{index}-0.log")) for index in range(2)]
    chaos = SimpleNamespace(workers=workers, apis=apis, namespace=object(), lease_s=5.0)
    return FaultInjector(cast(ChaosCluster, chaos), random.Random(seed), Timeline(Clock()), plan or FaultPlan())


def test_one_seed_draws_one_sequence_of_faults_and_each_pass_draws_every_kind() -> None:
    drawing = injector(7)
    first = [drawing.draw_round() for _ in range(12)]
    again = injector(7)
    assert [again.draw_round() for _ in range(12)] == first
    other = injector(8)
    assert [other.draw_round() for _ in range(12)] != first
    kinds = [fault.kind for round_ in first for fault in round_]
    assert sorted(kinds[: len(FAULT_KINDS)]) == sorted(FAULT_KINDS)


def test_a_round_faults_each_process_once_and_freezes_past_the_lease() -> None:
    drawn = injector(3, FaultPlan(compound_share=1.0, lead=("worker_partition",)))
    rounds = [drawn.draw_round() for _ in range(30)]
    assert rounds[0][0].kind == "worker_partition" and rounds[0][0].target == 1
    for faults in rounds:
        targets = [
            (fault.kind.split("_")[0], fault.target) for fault in faults if fault.kind.startswith(("worker", "api"))
        ]
        assert len(targets) == len(set(targets)), faults
        for fault in faults:
            if fault.kind in ("worker_sigstop", "worker_partition"):
                assert fault.hold_s > 5.0
