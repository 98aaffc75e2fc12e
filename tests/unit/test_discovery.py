"""Capability discovery: match tiers, ordering, suggestions and least-loaded picks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.discovery import (
    Candidate,
    MatchKind,
    close_matches,
    description_score,
    find_holders,
    match_kind,
    normalize_tag,
    pick_least_loaded,
)


def agent(
    agent_id: str, *caps: str, load: int = 0, online: bool = True, description: str = ""
) -> Candidate:
    return Candidate(agent_id, caps, description=description, online=online, load=load)


def ids(candidates: list[Candidate]) -> list[str]:
    return [c.agent_id for c in candidates]


# --- normalize_tag and match_kind -------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("order.query", "order.query"),
        ("order_query", "order.query"),
        ("Order-Query", "order.query"),
        ("  ORDER QUERY  ", "order.query"),
        ("order/query", "order.query"),
        ("order:query", "order.query"),
        ("order__-- query", "order.query"),
        ("._order.query._", "order.query"),
        ("Order_Query.*", "order.query.*"),
        ("order_*", "order.*"),
        ("...", ""),
    ],
)
def test_normalize_tag_folds_case_and_separators_into_dots(tag: str, expected: str) -> None:
    assert normalize_tag(tag) == expected


def test_identical_tag_is_an_exact_match() -> None:
    assert match_kind("order.query", "order.query") is MatchKind.EXACT


@pytest.mark.parametrize("query", ["order", "order.*"])
@pytest.mark.parametrize("tag", ["order", "order.query", "order.refund.status"])
def test_parent_and_wildcard_queries_hierarchy_match_descendants(query: str, tag: str) -> None:
    assert match_kind(query, tag) in {MatchKind.EXACT, MatchKind.HIERARCHY}
    if query != tag:
        assert match_kind(query, tag) is MatchKind.HIERARCHY


def test_child_query_does_not_match_its_parent() -> None:
    assert match_kind("order.query", "order") is None


@pytest.mark.parametrize("tag", ["order.query", "orders", "orderly.query"])
def test_partial_segment_does_not_hierarchy_match(tag: str) -> None:
    assert match_kind("ord", tag) is None


def test_parent_query_does_not_match_a_longer_sibling_word() -> None:
    assert match_kind("order", "orders") is None
    assert match_kind("order.*", "orders.list") is None


@pytest.mark.parametrize("query", ["order_query", "Order-Query", "ORDER QUERY", "order/query"])
def test_separator_and_case_variants_match_after_normalization(query: str) -> None:
    assert match_kind(query, "order.query") is MatchKind.NORMALIZED


def test_normalized_query_also_matches_descendants() -> None:
    assert match_kind("Order_Query", "order.query.status") is MatchKind.NORMALIZED
    assert match_kind("order_*", "order.refund") is MatchKind.NORMALIZED


@pytest.mark.parametrize("query", ["", "   ", ".*"])
def test_blank_query_matches_nothing(query: str) -> None:
    assert match_kind(query, "order.query") is None


# --- find_holders -----------------------------------------------------------------------------


def test_exact_tier_beats_hierarchy_and_normalized_tiers() -> None:
    exact = agent("exact", "order.query", load=9)
    hierarchy = agent("hier", "order.query.status", load=0)
    normalized = agent("norm", "Order_Query", load=0)
    found = find_holders("order.query", [normalized, hierarchy, exact])
    assert ids(found) == ["exact"]


def test_hierarchy_tier_beats_normalized_tier_when_no_exact_match() -> None:
    hierarchy = agent("hier", "order.query.status", load=5)
    normalized = agent("norm", "Order_Query", load=0)
    assert ids(find_holders("order.query", [normalized, hierarchy])) == ["hier"]


def test_normalized_tier_is_used_when_nothing_better_exists() -> None:
    found = find_holders("order_query", [agent("a", "order.query"), agent("b", "billing")])
    assert ids(found) == ["a"]


def test_parent_query_finds_every_descendant_holder() -> None:
    holders = [
        agent("q", "order.query"),
        agent("s", "order.refund.status"),
        agent("x", "orders.list"),
        agent("p", "payment"),
    ]
    assert ids(find_holders("order", holders)) == ["q", "s"]
    assert ids(find_holders("order.*", holders)) == ["q", "s"]


def test_child_query_does_not_find_parent_holder() -> None:
    assert find_holders("order.query", [agent("a", "order")]) == []


def test_candidate_matches_at_its_best_capability() -> None:
    both = agent("both", "order_query", "order.query")
    only_normalized = agent("norm", "order_query")
    assert ids(find_holders("order.query", [only_normalized, both])) == ["both"]


def test_offline_candidates_are_never_returned() -> None:
    offline_exact = agent("off", "order.query", online=False)
    online_hierarchy = agent("on", "order.query.status")
    assert ids(find_holders("order.query", [offline_exact, online_hierarchy])) == ["on"]
    assert find_holders("order.query", [offline_exact]) == []


def test_holders_come_least_loaded_first_then_by_agent_id() -> None:
    holders = [
        agent("c", "order.query", load=2),
        agent("b", "order.query", load=0),
        agent("a", "order.query", load=2),
    ]
    assert ids(find_holders("order.query", holders)) == ["b", "a", "c"]


def test_no_holder_gives_an_empty_list() -> None:
    assert find_holders("shipping", [agent("a", "order.query")]) == []


def test_text_query_orders_holders_by_description_before_load() -> None:
    holders = [
        agent("idle", "order", load=0, description="Answers questions about invoices"),
        agent("busy", "order", load=7, description="Handles refund requests for orders"),
        agent("mid", "order", load=3, description="Tracks order status and refund state"),
    ]
    found = find_holders("order", holders, text="What is the status of my refund?")
    assert ids(found) == ["mid", "busy", "idle"]


def test_text_query_ranks_chinese_descriptions_by_characters() -> None:
    holders = [
        agent("ship", "order", description="查询物流和配送信息"),
        agent("refund", "order", load=5, description="处理订单退款申请"),
    ]
    assert ids(find_holders("order", holders, text="退款")) == ["refund", "ship"]


# --- description_score ------------------------------------------------------------------------


def test_description_score_is_the_share_of_query_words_found() -> None:
    assert description_score("refund status", "Shows the refund state") == 0.5
    assert description_score("refund status", "refund STATUS lookups") == 1.0
    assert description_score("refund status", "invoices") == 0.0


def test_description_score_ignores_english_stop_words() -> None:
    assert description_score("what is the refund", "refund desk") == 1.0


def test_description_score_counts_each_chinese_character() -> None:
    assert description_score("退款", "处理订单退款申请") == 1.0
    assert description_score("退货", "处理订单退款申请") == 0.5
    assert description_score("物流", "处理订单退款申请") == 0.0


@pytest.mark.parametrize("text", ["", "   ", "the of and", "?!"])
def test_description_score_of_an_empty_query_is_zero(text: str) -> None:
    assert description_score(text, "the refund of and desk") == 0.0


# --- close_matches ----------------------------------------------------------------------------


def test_close_matches_suggests_the_tag_a_typo_meant() -> None:
    tags = ["order.query", "payment.capture", "shipping.track"]
    assert close_matches("order.qeury", tags) == ["order.query"]


def test_close_matches_returns_original_tags_without_repeats() -> None:
    tags = ["Order_Query", "order.query", "order.query", "billing"]
    assert close_matches("order-qeury", tags) == ["Order_Query", "order.query"]


def test_close_matches_returns_at_most_n_best_first() -> None:
    tags = ["order.query", "order.queue", "order.quer", "order.quota"]
    found = close_matches("order.query", tags, n=2)
    assert found == ["order.query", "order.quer"]
    assert close_matches("order.query", tags, n=0) == []


def test_close_matches_finds_nothing_for_an_unrelated_query() -> None:
    assert close_matches("zzz", ["order.query", "payment"]) == []


# --- pick_least_loaded ------------------------------------------------------------------------


def test_pick_least_loaded_picks_the_lowest_loads() -> None:
    pool = [agent("a", load=5), agent("b", load=1), agent("c", load=3)]
    assert ids(pick_least_loaded(pool, 1)) == ["b"]
    assert ids(pick_least_loaded(pool, 2)) == ["b", "c"]


def test_local_load_is_added_to_the_reported_load_and_changes_the_pick() -> None:
    pool = [agent("a", load=1), agent("b", load=2)]
    assert ids(pick_least_loaded(pool, 1)) == ["a"]
    assert ids(pick_least_loaded(pool, 1, local_load={"a": 2, "ghost": 0})) == ["b"]


def test_tiebreak_rotation_visits_equally_loaded_agents_round_robin() -> None:
    pool = [agent("c"), agent("a"), agent("d"), agent("b")]
    picks = [ids(pick_least_loaded(pool, 1, tiebreak=t))[0] for t in range(len(pool))]
    assert picks == ["a", "b", "c", "d"]
    assert ids(pick_least_loaded(pool, 1, tiebreak=len(pool))) == ["a"]


def test_tiebreak_does_not_override_a_lower_load() -> None:
    pool = [agent("a", load=1), agent("b", load=0), agent("c", load=1)]
    assert {ids(pick_least_loaded(pool, 1, tiebreak=t))[0] for t in range(6)} == {"b"}


def test_k_larger_than_the_pool_returns_every_candidate_in_order() -> None:
    pool = [agent("a", load=2), agent("b", load=0), agent("c", load=1)]
    assert ids(pick_least_loaded(pool, 10)) == ["b", "c", "a"]


@pytest.mark.parametrize("k", [0, -1])
def test_non_positive_k_picks_nobody(k: int) -> None:
    assert pick_least_loaded([agent("a")], k) == []


def test_empty_pool_picks_nobody() -> None:
    assert pick_least_loaded([], 3) == []


_pools = st.lists(
    st.builds(
        Candidate,
        agent_id=st.text(alphabet="abcdef", min_size=1, max_size=3),
        capabilities=st.just(()),
        load=st.integers(min_value=0, max_value=5),
    ),
    max_size=8,
    unique_by=lambda c: c.agent_id,
)


@given(
    pool=_pools,
    k=st.integers(min_value=-1, max_value=10),
    local=st.dictionaries(st.text(alphabet="abcdef", min_size=1, max_size=3), st.integers(0, 5)),
    tiebreak=st.integers(min_value=-20, max_value=20),
)
def test_every_picked_agent_is_no_busier_than_any_agent_left_out(
    pool: list[Candidate], k: int, local: dict[str, int], tiebreak: int
) -> None:
    picked = pick_least_loaded(pool, k, local_load=local, tiebreak=tiebreak)

    def load(c: Candidate) -> int:
        return c.load + local.get(c.agent_id, 0)

    left_out = [c for c in pool if c not in picked]
    assert len(picked) == max(0, min(k, len(pool)))
    assert [load(c) for c in picked] == sorted(load(c) for c in picked)
    assert all(load(p) <= load(o) for p in picked for o in left_out)
    assert picked == pick_least_loaded(list(reversed(pool)), k, local_load=local, tiebreak=tiebreak)
