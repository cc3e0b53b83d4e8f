"""The router's prefix tree and its policies (cache_aware, least_loaded, round_robin)."""

from __future__ import annotations

from gateway.plane.prefix_tree import PrefixTree
from gateway.plane.routing import Router, RoutingConfig, route_key, route_namespace
from gateway.plane.state import Replica, Stream
from protocol import messages as m


def test_tree_matches_the_longest_sent_prefix_and_splits_edges() -> None:
    t = PrefixTree()
    assert t.match("hello") == 0
    t.insert("hello world")
    assert t.match("hello world, again") == len("hello world")
    assert t.match("hello there") == len("hello ")
    t.insert("hello there")  # splits the edge after "hello "
    assert t.match("hello there!") == len("hello there")
    assert t.match("hello world") == len("hello world")
    assert t.size == len("hello world") + len("there")
    assert t.match("") == 0 and t.match("xyz") == 0


def test_tree_evicts_least_recently_used_leaves_beyond_its_bound() -> None:
    t = PrefixTree(max_chars=25)
    t.insert("system A: aaaaaaaa")  # 18 chars
    t.insert("system B: bbbbbbbb")  # shares "system " (7): +11 -> 29 > 25: evicts the LRU leaf
    assert t.size <= 25
    assert t.match("system B: bbbbbbbb") == len("system B: bbbbbbbb")  # the newest survives
    assert t.match("system A: aaaaaaaa") == len("system ")  # the old leaf went
    t.clear()
    assert t.size == 0 and t.match("system B") == 0


def _replica(name: str, load: int = 0) -> Replica:
    r = Replica(boot_id=name, name=name, identity=name.encode(), state="ready")
    for i in range(load):
        r.streams[f"{name}-{i}"] = Stream(f"{name}-{i}", "a", name)
    return r


SYS = {k: f"<system>You are assistant {k}. " + k * 400 for k in "ABCD"}


def test_cache_aware_keeps_each_system_prompt_on_one_replica() -> None:
    router = Router(RoutingConfig(policy="cache_aware"))
    reps = [_replica("r0"), _replica("r1")]
    homes: dict[str, set[str]] = {k: set() for k in SYS}
    for turn in range(5):
        for k, system in SYS.items():
            r = router.pick(reps, f"{system}<user>question {turn} about {k}")
            homes[k].add(r.name)
    assert all(len(h) == 1 for h in homes.values()), homes
    assert {next(iter(h)) for h in homes.values()} == {"r0", "r1"}  # spread over both
    assert all(r.hit_rate is not None and r.hit_rate > 0.7 for r in reps)


def test_round_robin_alternates_and_spreads_prefixes() -> None:
    router = Router(RoutingConfig(policy="round_robin"))
    reps = [_replica("r0"), _replica("r1")]
    names = [router.pick(reps, SYS["A"] + str(i)).name for i in range(4)]
    assert names == ["r0", "r1", "r0", "r1"]


def test_low_match_goes_to_the_least_loaded() -> None:
    router = Router(RoutingConfig(policy="cache_aware", match_threshold=0.5))
    for key, home in (("<system>short" + "x" * 400, "r1"), ("<system>short", "r0")):
        busy, idle = _replica("r0", load=3), _replica("r1", load=1)
        busy.tree.insert("<system>short")
        # 13 of ~400 characters: below the threshold, the idle one; a full match: the busy one
        assert router.pick([busy, idle], key).name == home


def test_the_balance_bound_stops_one_replica_taking_everything() -> None:
    router = Router(RoutingConfig(policy="cache_aware", balance_abs=4, balance_rel=1.5))
    hot, cold = _replica("r0", load=10), _replica("r1", load=1)
    hot.tree.insert(SYS["A"])
    assert router.pick([hot, cold], SYS["A"] + "more").name == "r1"  # 10 - 1 > 4 and > 1.5x
    warm, cold = _replica("r2", load=4), _replica("r1", load=1)
    warm.tree.insert(SYS["A"])
    assert router.pick([warm, cold], SYS["A"] + "more").name == "r2"  # 4 - 1 <= 4: by prefix


def test_least_loaded_counts_heartbeats_and_in_flight() -> None:
    router = Router(RoutingConfig(policy="least_loaded"))
    a, b = _replica("r0", load=2), _replica("r1")
    b.heartbeat = m.Heartbeat(boot_id="r1", step=1, running=3, waiting=2)  # another gateway's
    assert b.load == 5 and router.pick([a, b], "x").name == "r0"


def test_route_keys() -> None:
    gen = m.Generate(request_id="1", params=m.SamplingParams(), messages=[
        {"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text",
                                                                         "text": "U"}]}])
    assert route_key(gen) == "<system>S<user>U"
    assert route_key(m.Generate(request_id="2", params=m.SamplingParams(), prompt="p")) == "p"
    ids = route_key(m.Generate(request_id="3", params=m.SamplingParams(), prompt_ids=[1, 2]))
    assert len(ids) == 2
    assert route_key(m.Speak(request_id="4", text="t")) == ""


def test_route_keys_are_bounded_and_long_prompts_route_fast() -> None:
    import time

    from gateway.plane.routing import KEY_CHARS

    huge = m.Generate(request_id="5", params=m.SamplingParams(), prompt="x" * (4 << 20))
    assert len(route_key(huge)) == KEY_CHARS
    router = Router(RoutingConfig(tree_chars=1 << 20))
    reps = [_replica("r0"), _replica("r1")]
    started = time.thread_time()  # CPU time of this thread: other processes do not count
    for i in range(200):
        router.pick(reps, SYS["ABCD"[i % 4]] * 10 + f"turn {i}")
    assert time.thread_time() - started < 1.0  # 200 picks of ~40k-character keys


class _CountingIds(list):  # type: ignore[type-arg]
    """A list of token ids that counts the ids read one by one."""

    read = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for t in super().__iter__():
            _CountingIds.read += 1
            yield t


def test_route_key_of_token_ids_reads_only_the_key_prefix() -> None:
    """Old code built a character for every id of the prompt (262k ids: 62 ms on the event
    loop) and then kept the first KEY_CHARS."""
    from gateway.plane.routing import KEY_CHARS

    ids = _CountingIds(range(10 * KEY_CHARS))
    _CountingIds.read = 0
    key = route_key(m.Generate(request_id="6", params=m.SamplingParams(), prompt_ids=ids))
    assert len(key) == KEY_CHARS and key[1] == chr(0xE000 + 1)
    assert _CountingIds.read <= KEY_CHARS


def test_tree_namespaces_never_match_each_other_and_share_one_bound() -> None:
    t = PrefixTree(max_chars=30)
    t.insert("system A: aaaaaaaa", "tenant-1")  # 18 chars
    assert t.match("system A: aaaaaaaa", "tenant-1") == 18
    assert t.match("system A: aaaaaaaa", "tenant-2") == 0  # another tenant's text: no match
    assert t.match("system A: aaaaaaaa") == 0
    t.insert("system A: aaaaaaaa", "tenant-2")  # 36 > 30: the LRU leaf (tenant-1's) goes
    assert t.size == 18 and t.match("system A: aaaaaaaa", "tenant-1") == 0
    assert t.match("system A: aaaaaaaa", "tenant-2") == 18
    assert set(t.roots) == {"", "tenant-2"}  # the emptied namespace is forgotten
    t.clear()
    assert t.size == 0 and t.match("system A", "tenant-2") == 0


def test_routing_by_prefix_ignores_other_tenants() -> None:
    """Tenant 2's request goes where the load says, not where tenant 1 sent the same text."""
    router = Router(RoutingConfig(policy="cache_aware"))
    r0, r1 = _replica("r0"), _replica("r1", load=1)
    r1.tree.insert(SYS["A"], "tenant-1")
    assert router.pick([r0, r1], SYS["A"] + "q", "tenant-1").name == "r1"  # its own prefix
    assert router.pick([r0, r1], SYS["A"] + "q", "tenant-2").name == "r0"  # least loaded


def test_route_namespace_is_the_jobs_cache_salt() -> None:
    gen = m.Generate(request_id="1", params=m.SamplingParams(), prompt="p", cache_salt="s1")
    assert route_namespace(gen) == "s1" and route_key(gen) == "p"
    assert route_namespace(m.Generate(request_id="2", params=m.SamplingParams(), prompt="p")) == ""
    assert route_namespace(m.Speak(request_id="3", text="t")) == ""
