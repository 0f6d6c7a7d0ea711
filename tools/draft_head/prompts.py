"""Where the draft head's training prompts come from: the target model itself, and hand-written seeds.

No prompt is downloaded. Two sources, mixed per shard (``build_prompt_plan``):

* **Self-written prompts** (Magpie, Xu et al., arXiv 2406.08464): the target's chat template up to the start of a
  user turn, optionally followed by an opening word ("How do I", "Write a"...), is continued by the target itself
  at temperature ``MAGPIE_TEMPERATURE``; the user turn it writes is a prompt. ``looks_like_a_prompt`` keeps the
  plausible ones (the 135M model also writes noise: mixed languages, markup, unfinished text).
* **Seeded prompts**: a template of one of several kinds (advice, explanation, story, how-to, opinion, list,
  comparison, writing, code, arithmetic, rewriting) filled with a topic, both chosen at random.

Prompts that share ``BENCH_OVERLAP_WORDS`` consecutive words with a benchmark prompt
(``bench/data/free_chat_prompts.txt``) are never used (``BenchmarkFilter``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BENCH_PROMPTS = REPO / "bench" / "data" / "free_chat_prompts.txt"
#: A training prompt sharing this many consecutive words with a benchmark prompt is dropped.
BENCH_OVERLAP_WORDS = 6
MAGPIE_TEMPERATURE = 0.9
MAGPIE_TOP_P = 0.95
MAGPIE_MAX_TOKENS = 96

#: Opening words a self-written prompt may be forced to start with ("" = whatever the model writes first).
MAGPIE_OPENERS = (
    "", "", "", "", "Can you", "How do I", "What is", "Why", "Write a", "Explain", "Tell me", "Give me",
    "List", "I need", "What are", "Compare", "Describe", "Help me", "Should I", "What's the best way to",
    "I'm trying to", "Could you write", "Summarize", "Is it true that",
)

#: System prompts a conversation may start with (None: the chat template's own default, as the app sends).
SYSTEM_PROMPTS = (
    "You are a concise assistant. Keep answers short.",
    "You are a friendly assistant who explains things simply.",
    "You are a helpful assistant. Answer with bullet points when it helps.",
    "You are an expert teacher. Explain step by step.",
    "You are a creative writing assistant.",
    "Answer as briefly as possible.",
)

#: Second user turns of two-turn conversations.
FOLLOW_UPS = (
    "Can you explain that in more detail?",
    "Give me an example.",
    "Summarize that in one sentence.",
    "Can you make it shorter?",
    "Thanks! What else should I know?",
    "Rewrite your answer for a child.",
    "Why is that?",
    "Can you put that in a numbered list?",
    "What would you recommend first?",
    "Rewrite that in a more formal tone.",
    "Are there any downsides?",
    "Continue.",
)

TEMPLATES: dict[str, tuple[str, ...]] = {
    "advice": (
        "What advice would you give someone who wants to get better at {topic}?",
        "I'm struggling with {topic}. What should I do?",
        "Any tips for a beginner in {topic}?",
        "What are common mistakes people make with {topic}?",
        "How can I get more motivated about {topic}?",
    ),
    "explanation": (
        "Explain {topic} in simple terms.",
        "What is {topic} and why does it matter?",
        "Can you explain how {topic} works?",
        "What should everyone know about {topic}?",
        "Give me a short introduction to {topic}.",
        "What is the history of {topic}?",
    ),
    "story": (
        "Write a short story that involves {topic}.",
        "Tell me a story where {topic} plays an important role.",
        "Write a poem about {topic}.",
        "Write a short fable about {topic} with a moral at the end.",
    ),
    "howto": (
        "How do I get started with {topic}?",
        "What are the steps to learn {topic}?",
        "Give me a step-by-step guide to {topic}.",
        "How can I practice {topic} at home?",
    ),
    "opinion": (
        "What do you think about {topic}?",
        "Is {topic} overrated?",
        "What are the pros and cons of {topic}?",
        "Why do some people love {topic} and others don't?",
    ),
    "lists": (
        "List five interesting facts about {topic}.",
        "Give me ten ideas related to {topic}.",
        "What are the most important things to know about {topic}? Make a list.",
        "Name some books or resources about {topic}.",
    ),
    "comparison": (
        "Compare {topic} and {other}.",
        "What is the difference between {topic} and {other}?",
        "Which is better for a beginner, {topic} or {other}?",
    ),
    "writing": (
        "Write an email to a friend about {topic}.",
        "Write a short blog post about {topic}.",
        "Write a product description for something related to {topic}.",
        "Write a speech of about 100 words on {topic}.",
        "Write a tweet about {topic}.",
    ),
    "rewrite": (
        "Rewrite this sentence to sound more professional: I think {topic} is kind of cool and stuff.",
        "Fix the grammar: me and my friend was talking about {topic} all day yesterday.",
        "Make this more exciting: Today we learned about {topic}.",
        "Summarize this in one line: {topic} is something many people find interesting, and there is a lot to "
        "learn about it, from its basics to its more advanced parts.",
    ),
}

CODE_PROMPTS = (
    "Write a Python function that reverses a string.",
    "Write a Python function to check whether a number is prime.",
    "How do I read a CSV file in Python?",
    "Write a JavaScript function that returns the largest number in an array.",
    "Explain what a for loop is, with an example in Python.",
    "Write a SQL query that counts the rows in a table called orders.",
    "How do I sort a list of dictionaries by a key in Python?",
    "What is the difference between a list and a tuple in Python?",
    "Write a bash command that counts the lines in a file.",
    "Write a Python class for a bank account with deposit and withdraw methods.",
    "How do I make an HTTP request in Python?",
    "Write a function in C that adds two integers.",
    "Explain recursion with a simple example.",
    "How do I remove duplicates from a list in Python?",
    "Write HTML for a simple page with a title and a paragraph.",
    "What does git commit do?",
)

TOPICS = (
    "photography", "gardening", "baking bread", "learning to swim", "public speaking", "time management",
    "meditation", "chess", "climate change", "the Roman Empire", "volcanoes", "the human heart", "bees",
    "recycling", "saving for retirement", "learning guitar", "painting with watercolors", "camping",
    "healthy breakfast", "renewable energy", "the Moon", "dinosaurs", "ancient Egypt", "machine learning",
    "the internet", "electric bicycles", "yoga", "writing poetry", "knitting", "the French Revolution",
    "sharks", "rainforests", "volunteering", "job interviews", "studying for exams", "first aid",
    "coffee", "tea", "chocolate", "the ocean", "mountains", "deserts", "birds", "whales", "honey",
    "composting", "minimalism", "journaling", "podcasts", "video games", "board games", "soccer",
    "basketball", "marathon training", "cycling", "skiing", "the solar system", "Mars", "gravity",
    "electricity", "magnets", "photosynthesis", "the water cycle", "earthquakes", "hurricanes",
    "vitamins", "sleep", "stress", "friendship", "leadership", "teamwork", "negotiation", "budgeting",
    "credit cards", "starting a small business", "marketing", "customer service", "remote work",
    "learning Spanish", "learning Japanese", "reading habits", "libraries", "museums", "jazz",
    "classical music", "the piano", "drawing", "pottery", "origami", "woodworking", "bird watching",
    "fishing", "sailing", "traveling on a budget", "packing light", "train travel", "city parks",
    "urban farming", "cats", "dogs", "horses", "raising chickens", "aquariums", "houseplants",
    "cooking rice", "making soup", "vegetarian cooking", "spices", "pizza", "pasta", "salads",
    "the printing press", "the telephone", "airplanes", "trains", "bridges", "skyscrapers",
    "the Great Wall of China", "the pyramids", "Shakespeare", "fairy tales", "mythology", "superheroes",
    "robots", "space exploration", "telescopes", "microscopes", "bacteria", "the immune system",
    "memory", "habits", "procrastination", "kindness", "gratitude", "patience", "curiosity",
    "a rainy afternoon", "a lost key", "a talking cat", "a magic door", "an old map", "a small village",
    "a broken clock", "a secret garden", "a snowy night", "a long train ride", "a stubborn goat",
    "a brave mouse", "a forgotten letter", "the first day of school", "a summer festival",
    "spreadsheets", "email etiquette", "password security", "online privacy", "social media",
    "smartphones", "batteries", "solar panels", "wind turbines", "nuclear power", "plastic pollution",
    "clean water", "forests", "wolves", "elephants", "penguins", "ants", "butterflies", "coral reefs",
    "the Olympic Games", "the history of money", "banks", "taxes", "voting", "democracy",
    "the scientific method", "statistics", "probability", "fractions", "geometry", "algebra",
    "world maps", "weather forecasts", "tides", "the Northern Lights", "fireworks", "candles",
    "wedding planning", "moving house", "cleaning the kitchen", "organizing a closet", "home repairs",
)

ARITHMETIC = (
    "What is {a} plus {b}?",
    "If I have {a} apples and give away {c}, how many are left?",
    "What is {a} times {c}?",
    "A train travels {a} kilometers in {c} hours. What is its average speed?",
    "I earn {a} dollars a week and spend {c}. How much do I save in a month?",
)


def seeded_prompt(rng: np.random.Generator) -> tuple[str, str]:
    """A templated prompt ``(kind, text)`` drawn with ``rng`` (every kind about equally likely)."""
    kinds = list(TEMPLATES) + ["code", "arithmetic"]
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "code":
        return kind, CODE_PROMPTS[int(rng.integers(len(CODE_PROMPTS)))]
    if kind == "arithmetic":
        a, b, c = (int(x) for x in rng.integers(2, 500, 3))
        return kind, ARITHMETIC[int(rng.integers(len(ARITHMETIC)))].format(a=a, b=b, c=min(c % 20 + 2, a))
    templates = TEMPLATES[kind]
    topic, other = (TOPICS[int(i)] for i in rng.choice(len(TOPICS), 2, replace=False))
    return kind, templates[int(rng.integers(len(templates)))].format(topic=topic, other=other)


_NOISE = re.compile(r"<\|im_|\[/?[A-Z_]{3,}\]|https?://|#\w+#|\ufffd")


def looks_like_a_prompt(text: str) -> bool:
    """Whether a self-written user turn is plausible: 3-120 words, mostly ASCII letters, no chat markup, links
    or replacement characters, ending like a sentence."""
    words = text.split()
    if not 3 <= len(words) <= 120 or _NOISE.search(text):
        return False
    letters = sum(ch.isalpha() for ch in text)
    ascii_letters = sum(ch.isascii() and ch.isalpha() for ch in text)
    if letters == 0 or ascii_letters / letters < 0.97 or letters / len(text) < 0.6:
        return False
    return text.rstrip()[-1] in ".?!)\"'"


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


class BenchmarkFilter:
    """Refuses prompts that share ``BENCH_OVERLAP_WORDS`` consecutive words with a benchmark prompt.

    Args:
        path: the benchmark's prompt file (``kind<TAB>prompt`` lines, ``#`` comments).
    """

    def __init__(self, path: Path = BENCH_PROMPTS):
        self.shingles: set[tuple[str, ...]] = set()
        self.whole: set[tuple[str, ...]] = set()
        for prompt in read_bench_prompts(path):
            words = _words(prompt)
            self.whole.add(tuple(words))
            self.shingles.update(_shingles(words))

    def allows(self, prompt: str) -> bool:
        """False when ``prompt`` is a benchmark prompt or overlaps one by BENCH_OVERLAP_WORDS words."""
        words = _words(prompt)
        return tuple(words) not in self.whole and not (set(_shingles(words)) & self.shingles)


def _shingles(words: list[str]) -> list[tuple[str, ...]]:
    n = BENCH_OVERLAP_WORDS
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def read_bench_prompts(path: Path = BENCH_PROMPTS) -> list[str]:
    """The benchmark's prompts, in file order."""
    return [kind_and_prompt[1] for kind_and_prompt in read_bench_file(path)]


def read_bench_file(path: Path = BENCH_PROMPTS) -> list[tuple[str, str]]:
    """``(kind, prompt)`` pairs of a benchmark prompt file."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            kind, prompt = line.split("\t", 1)
            pairs.append((kind.strip(), prompt.strip()))
    return pairs
