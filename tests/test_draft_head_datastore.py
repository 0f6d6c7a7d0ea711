"""tools/draft_head/datastore_check.py's datastore: the most frequent continuation of the longest suffix seen often
enough, with its share of that suffix's continuations; only reply tokens count as continuations."""

from tools.draft_head.datastore_check import Datastore


def test_the_longest_suffix_seen_often_enough_decides():
    store = Datastore(max_ngram=3)
    store.add([9, 9, 1, 2, 3, 1, 2, 3, 1, 2, 4], start=2)  # a 2-token prompt, then its reply: "1 2" -> 3, 3, 4
    store.add([5, 1, 2, 4, 7, 5, 1, 2, 4], start=0)  # "1 2" -> 4, 4; "5 1 2" -> 4, 4
    assert store.propose([0, 1, 2]) == (4, 3 / 5)  # "0 1 2" unseen: "1 2", 4 of its 5 continuations 3 times
    assert store.propose([5, 1, 2]) == (4, 1.0)  # the longer suffix, seen twice, decides
    assert store.propose([5, 1, 2], min_support=3) == (4, 3 / 5)  # seen too rarely: back to "1 2"
    assert store.propose([9, 1, 2]) == (4, 3 / 5)  # "9 1 2" -> 3 once only
    assert store.propose([9, 1, 2], min_support=1) == (3, 1.0)
    assert store.propose([9]) is None  # "9" -> 1 once (the prompt's own "9 9" is not a continuation)
    assert store.propose([9], min_support=1) == (1, 1.0)
    assert store.propose([8]) is None
