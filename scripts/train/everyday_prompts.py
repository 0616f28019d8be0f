#!/usr/bin/env python
"""Prompts of everyday kinds of writing (how to cook or mend something, advice, a memory, a letter, a review, a
story, local news, how something works), one a line, for ``gemma_own_text.py --prompts-file``: the target's own
continuations of them are what a feature draft for ordinary English learns from. Each is a frame with its blanks
filled from short lists, every combination; none shares its first four words with a prompt of the timed benchmark
(``scripts/measure/gemma_vs_llamacpp.py``) or of the set drafts are chosen by
(``scripts/measure/gemma_draft_acceptance.py``), which are checked here and refused.

    python scripts/train/everyday_prompts.py > data/everyday-prompts.txt

The frames are only ever added to at the end, so an earlier file is a head of a later one; ``--skip N`` prints what
came after its N lines (the 26 frames after the first 488 prompts: how things are made and work, body and health,
sport, stories, notices, buildings, views and opinions).
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

MEASURE = Path(__file__).resolve().parents[1] / "measure"

FILL = {
    "dish": ["a vegetable curry", "pancakes", "a fruit salad", "fresh lemonade", "fried rice", "a chocolate cake",
             "a pot of chili", "banana bread", "a green salad", "potato soup", "roast chicken", "an omelette"],
    "task": ["learn to swim", "save money", "grow tomatoes", "train a puppy", "write a cover letter",
             "fix a leaking tap", "clean an oven", "study for an exam", "pack for a long trip", "make new friends",
             "stop procrastinating", "run a marathon"],
    "person": ["father", "neighbour", "old coach", "best friend", "uncle", "first boss", "piano teacher",
               "older sister"],
    "place": ["the beach near our house", "my school", "the park", "our kitchen", "the farm", "the harbour",
              "the old cinema", "my grandparents' garden"],
    "name": ["Sarah", "Mr Jones", "Grandpa", "Emily", "Professor Lee", "Mum", "David", "Mrs Patel"],
    "thing": ["this vacuum cleaner", "the new phone", "a pair of running shoes", "this coffee machine",
              "the hotel", "this backpack", "the restaurant on Main Street", "this novel"],
    "group": ["firefighters", "school children", "volunteers", "shop owners", "nurses", "bus drivers",
              "gardeners", "students"],
    "topic": ["tea", "the printing press", "chess", "umbrellas", "the postal service", "football", "glass",
              "the calendar", "coffee", "paper money"],
    "role": ["parent", "manager", "coach", "nurse", "friend", "neighbour", "chef", "driver"],
    "animal": ["fox", "little dog", "old horse", "cat", "owl", "rabbit", "goat", "bear"],
    "season": ["spring", "summer", "autumn", "winter"],
    "city": ["Paris", "a small town in Wales", "Tokyo", "the mountains", "Lisbon", "a fishing village",
             "New York", "the countryside"],
    "job": ["a teacher", "a baker", "a plumber", "a librarian", "a farmer", "a pilot", "a waiter",
            "an electrician"],
    "event": ["the school fair", "the wedding", "the first day of school", "the concert", "the family reunion",
              "the job interview", "the birthday party", "the football final"],
    "habit": ["walking every day", "reading before bed", "drinking enough water", "keeping a diary",
              "cooking at home", "getting up early", "turning off screens at night", "stretching"],
    "object": ["a bicycle chain", "a wooden chair", "a garden hose", "a zipper", "a laptop battery",
               "leather boots", "a kitchen knife", "a wool sweater"],
    "science": ["rainbows", "thunder", "earthquakes", "tides", "magnets", "the seasons", "vaccines",
                "batteries"],
    "feeling": ["nervous", "homesick", "proud", "lonely", "excited", "tired", "grateful", "angry"],
    "product": ["a reading lamp", "noise-cancelling headphones", "a camping tent", "an electric kettle",
                "a robot vacuum", "a rice cooker", "a standing desk", "a smart watch"],
    "organ": ["heart", "liver", "lung", "kidney", "skin", "stomach", "brain", "eye"],
    "material": ["steel", "glass", "paper", "cheese", "soap", "chocolate", "wool", "concrete"],
    "problem": ["air pollution", "traffic jams", "tooth decay", "rising prices", "floods", "forest fires",
                "back pain", "loneliness"],
    "device": ["a microwave oven", "a solar panel", "a thermostat", "a door lock", "a compass", "a car engine",
               "a camera", "a refrigerator's compressor"],
    "pair": ["weather and climate", "a lake and a pond", "a crocodile and an alligator", "a cold and the flu",
             "a town and a city", "a poem and a song", "saving and investing", "a hill and a mountain"],
    "sport": ["football", "basketball", "cricket", "tennis", "rugby", "volleyball", "ice hockey", "baseball"],
    "character": ["the detective", "a small girl", "the old sailor", "the stranger", "my brother",
                  "the new teacher", "the young queen", "the farmer's son"],
    "daypart": ["morning", "afternoon", "evening", "night"],
    "club": ["chess club", "book club", "choir", "football club", "garden society", "parents' association",
             "residents' committee", "drama group"],
    "building": ["cathedral", "bridge", "town hall", "castle", "railway station", "lighthouse", "market hall",
                 "old mill"],
    "century": ["twelfth", "fifteenth", "seventeenth", "eighteenth", "nineteenth", "twentieth"],
    "view": ["the hill behind the church", "the tower", "the old castle walls", "the top floor",
             "the mountain pass", "the lighthouse"],
    "claim": ["homework does more harm than good", "cities should close their centres to cars",
              "children should learn to cook at school", "everyone should learn a second language",
              "television is a waste of time", "shops should close on Sundays", "exams are unfair",
              "working from home is better for everyone"],
    "activity": ["gardening", "learning an instrument", "volunteering", "walking the dog", "team sports",
                 "painting", "cycling to work", "playing board games"],
    "appliance": ["dishwasher", "washing machine", "printer", "boiler", "television", "oven", "router",
                  "dryer"],
}
FRAMES = [
    "To make {dish}, you will need",
    "Here is how I make {dish} at home:",
    "The trick to {task} is",
    "Anyone who wants to {task} should start by",
    "Three things helped me {task}:",
    "My {person} always told me that",
    "I will never forget the day my {person}",
    "When I was young, {place} was",
    "Every {season}, {place}",
    "Dear {name}, I hope you are well. I am writing because",
    "Hello {name}, thanks for your message about",
    "I bought {thing} last month, and",
    "Review: {thing} is",
    "Last week the {group} of our town",
    "A group of local {group} has",
    "The story of {topic} begins",
    "Few people know that {topic}",
    "A good {role} knows that",
    "The hardest part of being a {role} is",
    "Once there was a {animal} who",
    "Late one {season} evening, a {animal}",
    "My first week as {job} taught me",
    "What I love most about working as {job} is",
    "Job opening: we are looking for {job} who",
    "We spent a week in {city}, and",
    "If you ever visit {city}, make sure you",
    "Everyone was talking about {event}, because",
    "On the morning of {event}, I",
    "Since I started {habit}, I have noticed",
    "Doctors say that {habit} can",
    "To repair {object}, you will need",
    "Taking care of {object} is easy if you",
    "Here is a simple explanation of {science}:",
    "Scientists have long studied {science}, and",
    "I felt {feeling} the whole day, so",
    "It is normal to feel {feeling} when",
    "Thank you for choosing {product}. Before first use,",
    "Pros and cons of {product}:",
    "Q: How do I {task}? A:",
    "Ten tips for anyone who wants to {task}: 1.",
    "Today in class we learned about {topic}. Our teacher",
    "A short history of {topic}:",
    "Notice to all residents: starting this {season},",
    "The weather this {season} has been",
    "My {person} and I used to spend every Sunday",
    "Meeting notes: the {group} agreed to",
    "In my opinion, the best thing about {place} is",
    "Yesterday {name} called to tell me",
    "Chapter One. The {animal} woke up early",
    "The recipe for {dish} has been in our family for",
    "Breaking news: {group} in the city centre",
    "The {organ} is an organ that",
    "Keeping the {organ} healthy means",
    "{material} is made by",
    "The way {material} was made changed when",
    "The main causes of {problem} are",
    "What can a town do about {problem}? First,",
    "How does {device} work? In simple terms,",
    "Inside {device} there is",
    "The difference between {pair} is",
    "People often confuse {pair}, but",
    "{sport} is played by two teams",
    "The rules of {sport} were first written down",
    "The door creaked open, and {character} stepped into",
    "Nobody in the village knew why {character}",
    "It was the last {daypart} of the {season} holidays, and",
    "The {club} will hold its annual",
    "Minutes of the {club} meeting: the chair opened by",
    "The {building} was built in the {century} century",
    "Visitors to the {building} are often surprised that",
    "From {view} you can see",
    "Some people believe that {claim}, but",
    "I used to think that {claim}. Then",
    "There are many reasons why {activity} is good for",
    "I took up {activity} last {season}, and",
    "If the {appliance} does not start, check",
    "Our {appliance} broke down one {daypart} just as",
]


def prompts() -> list[str]:
    """Every frame with every filling of its blanks, in order."""
    out = []
    for frame in FRAMES:
        keys = [k for k in FILL if "{" + k + "}" in frame]
        for values in itertools.product(*(FILL[k] for k in keys)):
            text = frame.format(**dict(zip(keys, values)))
            out.append(text[0].upper() + text[1:])
    return out


def held_apart(texts: list[str]) -> list[str]:
    """The prompts that share their first four words with a benchmark's prompt or the draft-choosing set's."""
    sys.path.insert(0, str(MEASURE))
    from gemma_draft_acceptance import EVERYDAY
    from gemma_vs_llamacpp import PROMPTS

    taken = {tuple(p.lower().split()[:4]) for p in (*PROMPTS, *EVERYDAY)}
    return [t for t in texts if tuple(t.lower().split()[:4]) in taken]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip", type=int, default=0, help="leave out the first N prompts (488: the frames up to "
                    "'Breaking news', what data/everyday-prompts-2.txt held)")
    args = ap.parse_args(argv)
    texts = prompts()
    if clash := held_apart(texts):
        raise SystemExit(f"prompts that open as a benchmark's or the choosing set's: {clash[:3]}")
    print("\n".join(texts[args.skip:]))


if __name__ == "__main__":
    main()
