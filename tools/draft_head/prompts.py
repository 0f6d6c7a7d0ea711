"""Where the draft head's training prompts come from: the target model itself, and hand-written seeds.

No prompt is downloaded. Two sources, mixed per shard (``build_prompt_plan``):

* **Self-written prompts** (Magpie, Xu et al., arXiv 2406.08464): the target's chat template up to the start of a
  user turn, optionally followed by an opening word ("How do I", "Write a"...), is continued by the target itself
  at temperature ``MAGPIE_TEMPERATURE``; the user turn it writes is a prompt. ``looks_like_a_prompt`` keeps the
  plausible ones (the 135M model also writes noise: mixed languages, markup, unfinished text).
* **Seeded prompts**: a template of one of several kinds (advice, explanation, story, how-to, opinion, list,
  comparison, writing, code, arithmetic, rewriting) filled with a topic, both chosen at random; or, for half of
  them, an everyday request (``EVERYDAY``: a concrete situation, object or character, as people write in chat).

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


#: Everyday requests in the words people use in chat: a concrete situation, object or character instead of a
#: topic name (the free-chat benchmark's kinds, never its texts: ``BenchmarkFilter`` still applies).
#: Each kind: templates whose ``{slot}`` fields are filled from ``EVERYDAY_SLOTS``.
EVERYDAY: dict[str, tuple[str, ...]] = {
    "everyday-advice": (
        "I {problem}.{about_me} What should I do?",
        "Lately I {problem}.{about_me} Do you have any suggestions?",
        "I {problem}.{about_me} What would you recommend?",
        "Help, I {problem}.{about_me} Where do I even start?",
    ),
    "everyday-explanation": (
        "Why does {event}?{how_much}",
        "How does {device} work? Keep it simple for {audience}.",
        "How does {device} work?",
        "Explain {concept} as if I were {audience}.",
        "Can you explain in simple words why {event}?",
    ),
    "everyday-story": (
        "Make up a story about {character} who {plot}.",
        "Write a short tale about {character} in {place}.",
        "I'd love a funny story about {character} who {plot}.",
        "Write a story for bedtime about {character} in {place}.",
    ),
    "everyday-howto": (
        "How do I {task}?{how_much}",
        "What is the easiest way to {task}?{how_much}",
        "Can you walk me through how to {task}?{how_much}",
        "Explain step by step how to {task}.{how_much}",
    ),
    "everyday-opinion": (
        "Is it better to {choice}?{stance}",
        "Do you think {claim}?{stance}",
        "What makes a good {role}?{stance}",
        "Is {purchase} worth the money?{stance}",
    ),
    "everyday-lists": (
        "List {count} {things}.",
        "Give me {count} ideas for {occasion}.",
        "What are some {things}?",
        "Name {count} {things}, with one sentence on each.",
    ),
}

EVERYDAY_SLOTS: dict[str, tuple[str, ...]] = {
    "problem": (
        "can't fall asleep before two in the morning", "keep forgetting to drink water during the day",
        "have a presentation at work tomorrow and I'm scared", "spend too much money on takeout",
        "have trouble getting out of bed in the morning", "feel lonely since my best friend moved away",
        "never finish the books I start", "get headaches after looking at screens all day",
        "want to eat more vegetables but I don't like most of them", "have a neighbor who plays loud music at night",
        "keep arguing with my sister about chores", "am starting a new job next week and feel anxious",
        "can't keep my desk tidy", "want to cook more but only have a tiny kitchen", "get bored at the gym",
        "forget people's names right after meeting them", "want to spend less time on my phone",
        "am planning my first trip abroad", "need to give a toast at my brother's wedding",
        "procrastinate on every assignment until the last night", "feel tired even after eight hours of sleep",
        "have a coworker who takes credit for my work", "want to ask for a raise but don't know how",
        "lose my keys almost every day", "have a dog that barks at every visitor",
        "can't stick to a morning routine", "get stressed when my inbox fills up",
        "want to get back in touch with an old friend", "have too many clothes and nothing to wear",
        "am learning to drive and get nervous on the highway",
    ),
    "event": (
        "ice float on water", "the moon change shape during the month", "popcorn pop", "milk go sour",
        "a balloon stick to the wall after you rub it on your hair", "the ocean taste salty",
        "thunder come after lightning", "soap remove grease", "a compass point north",
        "leaves change color in autumn", "metal feel colder than wood at the same temperature",
        "yeast make dough rise", "my voice sound strange on a recording", "cutting onions make people cry",
        "the sun look red at sunset", "a spoon look bent in a glass of water", "hair turn gray with age",
        "a kettle whistle", "the sea have waves", "bubbles come out round", "a car windshield fog up in winter",
        "yawning seem to be contagious", "my ears pop on an airplane", "cold weather make my phone battery drain",
    ),
    "device": (
        "a microwave oven", "a thermostat", "a smoke detector", "an elevator", "a touch screen", "a zipper",
        "noise-cancelling headphones", "a dishwasher", "a bicycle's gears", "a vacuum cleaner", "a heat pump",
        "a credit card payment", "GPS on my phone", "a pressure cooker", "an electric toothbrush", "a barcode scanner",
    ),
    "concept": (
        "compound interest", "how the heart pumps blood", "what DNA is", "how airplanes stay in the air",
        "what a credit score is", "how tides work", "what an allergy is", "how the stock market works",
        "what electricity is", "how plants drink water", "what a calorie is", "why we need sleep",
    ),
    "about_me": (
        "", "", "", " I'm a student.", " I work night shifts.", " I have two small kids.",
        " I live in a small apartment.", " I'm on a tight budget.", " I'm in my sixties.", " I work from home.",
    ),
    "how_much": ("", "", "", " I've never done it before.", " I'm in a hurry.", " I only have basic tools.",
                 " Please keep it short.", " Explain it like I'm a beginner."),
    "stance": ("", "", " Give me both sides.", " Be honest.", " Answer in a few sentences.", " Explain your reasoning.",
               " Keep it short."),
    "audience": ("five years old", "twelve", "a complete beginner", "my grandmother", "a high school student"),
    "character": (
        "a shy giraffe", "an old fisherman", "a curious little fox", "a grumpy wizard", "a boy who collects stones",
        "a retired astronaut", "a tiny snail", "a baker in a busy city", "a lonely scarecrow", "a clumsy knight",
        "a young inventor", "a cloud that wants to rain", "a cat who lives in a library", "a forgetful owl",
        "a girl with a red kite", "a mail carrier on a bicycle", "a penguin who hates the cold", "two rival chefs",
    ),
    "plot": (
        "gets lost on the way home", "discovers a hidden door in the attic", "wins a race nobody expected to win",
        "finds an old map under the floor", "makes friends with an unlikely neighbor", "has to solve a small mystery",
        "wants to see the sea for the first time", "loses their voice before a big show",
        "builds something out of junk", "tries to throw a surprise party",
    ),
    "place": (
        "a floating city", "a desert oasis", "a busy train station", "an underwater kingdom",
        "a village in the mountains", "a space station", "a haunted bakery", "a jungle at night",
        "a tiny island town", "a toy shop after closing time",
    ),
    "task": (
        "fold a fitted sheet", "make pancakes from scratch", "unclog a kitchen sink", "plant a young tree",
        "iron a shirt without creases", "light a charcoal grill", "set up a home Wi-Fi network", "repot a cactus",
        "tie a tie", "make a paper boat", "get a coffee stain out of a carpet", "pick a ripe avocado",
        "wrap a present neatly", "back up the photos on my phone", "hang a picture straight",
        "make fresh lemonade", "get ready for a long flight", "learn to juggle three balls",
        "patch a small hole in a wall", "sharpen a kitchen knife", "descale a kettle", "cook rice on the stove",
        "write a polite complaint email", "plan a week of meals",
    ),
    "choice": (
        "work from home or in an office", "cook at home or eat out", "travel alone or with friends",
        "live in the city or in the countryside", "have a cat or a dog", "study in the morning or at night",
        "buy a new phone or repair the old one", "take the train or drive", "read on paper or on a screen",
        "save money or spend it on experiences",
    ),
    "claim": (
        "kids should learn to code", "breakfast is the most important meal", "school days should start later",
        "everyone should learn to swim", "people should take breaks from social media", "zoos are good for animals",
        "handwriting still matters", "video games can be educational",
    ),
    "role": ("friend", "neighbor", "boss", "coach", "doctor", "parent", "roommate", "team captain", "tour guide"),
    "purchase": (
        "a gym membership", "a smartwatch", "an expensive mattress", "a cooking class", "a robot vacuum",
        "a standing desk", "a good pair of running shoes", "a coffee machine",
    ),
    "count": ("three", "four", "five", "six", "seven", "ten"),
    "things": (
        "foods that are high in protein", "board games for a family night", "ways to reuse glass jars",
        "animals that live in the Arctic", "fruits that grow on trees", "songs to sing around a campfire",
        "hobbies you can do at home", "exercises you can do without equipment", "cheap things to do on a weekend",
        "things to bring to a picnic", "famous inventors and what they made", "musical instruments for kids",
        "countries in South America", "flowers that bloom in spring", "questions to ask on a first day at work",
        "ways to cool down a room without air conditioning", "breakfast ideas that take five minutes",
    ),
    "occasion": (
        "a family reunion", "a science fair project", "a lazy Sunday", "a long road trip", "a school fundraiser",
        "a small balcony garden", "a retirement party", "a first date", "a team-building day", "a snow day",
    ),
}
#: Share of seeded prompts drawn from ``EVERYDAY`` (the rest from ``TEMPLATES``, code and arithmetic).
EVERYDAY_SHARE = 0.5


def everyday_prompt(rng: np.random.Generator) -> tuple[str, str]:
    """An everyday request ``(kind, text)`` drawn with ``rng`` from ``EVERYDAY`` (kinds equally likely)."""
    kind = list(EVERYDAY)[int(rng.integers(len(EVERYDAY)))]
    template = EVERYDAY[kind][int(rng.integers(len(EVERYDAY[kind])))]
    slots = {name: values[int(rng.integers(len(values)))] for name, values in EVERYDAY_SLOTS.items()}
    return kind, template.format(**slots)


def seeded_prompt(rng: np.random.Generator) -> tuple[str, str]:
    """A templated prompt ``(kind, text)`` drawn with ``rng``: ``everyday_prompt`` with probability
    ``EVERYDAY_SHARE``, else a kind of ``TEMPLATES``, code or arithmetic (about equally likely)."""
    if rng.random() < EVERYDAY_SHARE:
        return everyday_prompt(rng)
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
