"""
corpus: the default model's training text, generated from a small
grammar with a seeded random.Random, so that the same seed gives the same
documents on any machine (Python's Mersenne Twister and its choice() are
stable since Python 3.2 for the calls used here: random(), randrange(),
choice()).

Two kinds of document, all plain ASCII, joined by <|endoftext|> when
packed for training (train.py):
  - stories: a protagonist (name, animal, pronoun kept consistent), a
    place, an object, a friend, and one of a few plots told in short
    sentences with some dialogue;
  - chats in the model's chat template (ChatML, CHAT_TEMPLATE below):
    a user turn (greetings, small facts, questions answered from the
    question itself, story requests) and the assistant's answer, ended by
    <|im_end|>; some with a system turn, some with two exchanges.

Invariants: a document's words come only from the word lists and the
sentence patterns below (words() collects them, and the test of the
trained model checks its answers against that set); every chat
document ends with the assistant's <|im_end|> and a newline, exactly as
the template renders a finished turn.
"""

import random
import re

BOS = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIALS = [BOS, IM_START, IM_END]

# ChatML, as kvserve's Jinja interpreter runs it (and Hugging Face's)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}")

BOYS = ["Tom", "Ben", "Sam", "Max", "Jack", "Leo", "Tim", "Dan", "Finn",
        "Joe", "Bob", "Ned"]
GIRLS = ["Lily", "Mia", "Anna", "Lucy", "Emma", "Zoe", "Sara", "Amy",
         "Kate", "Rosa", "Nina", "Ella"]
ANIMALS = ["cat", "dog", "bird", "rabbit", "fox", "bear", "duck", "frog",
           "mouse", "horse", "cow", "pig", "owl", "fish", "lion", "sheep"]
SOUNDS = {"cat": "meow", "dog": "woof", "bird": "tweet", "duck": "quack",
          "frog": "ribbit", "mouse": "squeak", "horse": "neigh",
          "cow": "moo", "pig": "oink", "owl": "hoot", "lion": "roar",
          "sheep": "baa"}
HOMES = {"cat": "in a house", "dog": "in a house", "bird": "in a nest",
         "rabbit": "in a hole", "fox": "in the forest",
         "bear": "in a cave", "duck": "on the pond", "frog": "in the pond",
         "mouse": "in a hole", "horse": "on a farm", "cow": "on a farm",
         "pig": "on a farm", "owl": "in a tree", "fish": "in the water",
         "lion": "in the grass", "sheep": "on a farm"}
FLIERS = {"bird", "duck", "owl"}
SWIMMERS = {"fish", "duck", "frog"}
SIZES = ["little", "big", "small", "tiny"]
TRAITS = ["happy", "kind", "brave", "shy", "funny", "clever", "sleepy",
          "curious", "gentle", "busy"]
COLORS = ["red", "blue", "green", "yellow", "white", "pink", "brown",
          "orange", "purple", "black"]
OBJECTS = ["ball", "kite", "box", "hat", "book", "boat", "cake", "drum",
           "cup", "shoe", "bag", "toy", "flower", "apple", "star", "key"]
PLACES = ["park", "garden", "forest", "house", "farm", "beach", "school",
          "hill", "river", "meadow", "town", "yard"]
# present, past
ACTS = [("play", "played"), ("run", "ran"), ("jump", "jumped"),
        ("sing", "sang"), ("dance", "danced"), ("swim", "swam"),
        ("read", "read"), ("draw", "drew"), ("climb", "climbed"),
        ("walk", "walked"), ("laugh", "laughed"), ("hide", "hid")]
FEELINGS = ["happy", "sad", "scared", "excited", "proud", "surprised",
            "tired", "glad"]
SPOTS = ["under the bed", "behind a tree", "in the grass",
         "under a rock", "near the door", "in a box", "by the river",
         "on the hill"]
WEATHER = [("sunny", "The sun was warm and bright."),
           ("rainy", "The rain made big puddles."),
           ("windy", "The wind blew the leaves around."),
           ("snowy", "The snow was soft and white.")]
FACTS = [("the sky", "blue"), ("the grass", "green"), ("the sun", "yellow"),
         ("snow", "white"), ("a cloud", "white"), ("the sea", "blue"),
         ("a banana", "yellow"), ("a leaf", "green"), ("a carrot", "orange"),
         ("the night", "black")]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven",
           "eight", "nine", "ten"]
SYSTEMS = ["You are a helpful assistant.", "You tell short stories.",
           "You are a friendly storyteller."]
MODEL_NAME = "Kiko"
# the kinds of qa(), each as often as it appears here
QA_KINDS = [0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 7, 8, 8, 8, 9, 9, 9, 10, 11, 11,
            11, 12, 13]


def cap(s):
    return s[0].upper() + s[1:]


def a_an(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


class Hero:
    """A story's protagonist: name, pronouns, animal."""

    def __init__(self, rng, animal=None, avoid=None):
        boy = rng.random() < 0.5
        names = [n for n in (BOYS if boy else GIRLS) if n != avoid]
        self.name = rng.choice(names)
        self.he, self.him, self.his = (("he", "him", "his") if boy
                                       else ("she", "her", "her"))
        self.animal = animal or rng.choice(ANIMALS)
        self.trait = rng.choice(TRAITS)


def opening(rng, h, place):
    k = rng.randrange(4)
    if k == 0:
        return ("Once upon a time, there was %s named %s."
                % (a_an(rng.choice(SIZES) + " " + h.animal), h.name))
    if k == 1:
        return ("%s was %s who lived near the %s."
                % (h.name, a_an(h.trait + " " + h.animal), place))
    if k == 2:
        return ("Once upon a time, %s lived in a %s %s."
                % (a_an(h.animal) + " named " + h.name,
                   rng.choice(SIZES), rng.choice(["house", "town", "farm"])))
    return ("There was once %s. %s name was %s."
            % (a_an(h.trait + " " + h.animal), cap(h.his), h.name))


def plot_find(rng, h, f, place, obj, color):
    act, acted = rng.choice(ACTS)
    feel = rng.choice(["happy", "excited", "surprised", "glad"])
    out = ["%s liked to %s in the %s." % (cap(h.he), act, place),
           "One day, %s found %s %s." % (h.name, a_an(color), obj),
           "%s was very %s." % (cap(h.he), feel),
           "%s showed the %s to %s, %s %s." % (h.name, obj, f.name,
                                             a_an(f.trait), f.animal),
           '"What a nice %s!" said %s.' % (obj, f.name),
           "They %s with the %s all day." % (acted, obj)]
    return out


def plot_lost(rng, h, f, place, obj, color):
    spot = rng.choice(SPOTS)
    return ["%s had %s %s. %s loved it very much." % (h.name, a_an(color),
                                                      obj, cap(h.he)),
            "One day, %s could not find %s %s." % (h.he, h.his, obj),
            "%s was sad." % cap(h.he),
            '"Can you help me?" asked %s.' % h.name,
            '"Yes, I can help you," said %s.' % f.name,
            "They looked all over the %s." % place,
            "At last, %s found the %s %s." % (f.name, obj, spot),
            '"Thank you!" said %s.' % h.name,
            "%s was happy again." % h.name]


def plot_weather(rng, h, f, place, obj, color):
    kind, line = rng.choice(WEATHER)
    act, acted = rng.choice(ACTS)
    return ["It was a %s day. %s" % (kind, line),
            "%s went to the %s with %s friend %s." % (h.name, place, h.his,
                                                    f.name),
            '"Let us %s!" said %s.' % (act, f.name),
            "They %s and laughed." % acted,
            "Then they saw %s %s." % (a_an(color), obj),
            "%s took the %s home." % (h.name, obj)]


def plot_new_friend(rng, h, f, place, obj, color):
    act, acted = rng.choice(ACTS)
    return ["%s was shy and had no friends." % h.name,
            "One day, %s went to the %s." % (h.he, place),
            "There %s met %s named %s." % (h.he, a_an(f.animal), f.name),
            '"Hello, %s," said %s. "Do you want to %s with me?"'
            % (h.name, f.name, act),
            '"Yes, I do!" said %s.' % h.name,
            "They %s together, and %s was not shy any more." % (acted,
                                                               h.name),
            "%s and %s became good friends." % (h.name, f.name)]


def plot_gift(rng, h, f, place, obj, color):
    return ["%s wanted to give %s a gift." % (h.name, f.name),
            "%s made %s %s." % (cap(h.he), a_an(color), obj),
            "%s took it to the %s." % (cap(h.he), place),
            '"This is for you," said %s.' % h.name,
            "%s smiled. \"I love it! Thank you, %s.\"" % (f.name, h.name),
            "%s felt %s." % (h.name, rng.choice(["proud", "happy", "glad"]))]


PLOTS = [plot_find, plot_lost, plot_weather, plot_new_friend, plot_gift]


def ending(rng, h):
    k = rng.randrange(4)
    if k == 0:
        return "At the end of the day, %s went home." % h.name
    if k == 1:
        return "%s was %s and went to sleep." % (h.name,
                                                 rng.choice(["tired",
                                                             "happy"]))
    if k == 2:
        return "It was the best day ever."
    return "The end."


def story(rng, animal=None):
    h = Hero(rng, animal)
    f = Hero(rng, avoid=h.name)
    place = rng.choice(PLACES)
    obj = rng.choice(OBJECTS)
    color = rng.choice(COLORS)
    lines = [opening(rng, h, place)]
    lines += rng.choice(PLOTS)(rng, h, f, place, obj, color)
    lines.append(ending(rng, h))
    return " ".join(lines)


def qa(rng):
    """One user question and the assistant's answer; the questions whose
    answer copies a word of the question come more often."""
    k = rng.choice(QA_KINDS)
    if k == 0:
        return (rng.choice(["Hello!", "Hi!", "Hello.", "Hi there!"]),
                rng.choice(["Hello! How can I help you today?",
                            "Hi! Do you want to hear a story?"]))
    if k == 1:
        return (rng.choice(["How are you?", "How are you today?"]),
                "I am fine, thank you. How are you?")
    if k == 2:
        return ("What is your name?",
                "My name is %s. I am a small model that tells stories."
                % MODEL_NAME)
    if k == 3:
        thing, color = rng.choice(FACTS)
        return ("What color is %s?" % thing,
                "%s is %s." % (cap(thing), color))
    if k == 4:
        an = rng.choice(sorted(SOUNDS))
        return ("What does %s say?" % a_an(an),
                "%s says %s." % (cap(a_an(an)), SOUNDS[an]))
    if k == 5:
        an = rng.choice(ANIMALS)
        return ("Where does %s live?" % a_an(an),
                "%s lives %s." % (cap(a_an(an)), HOMES[an]))
    if k == 6:
        an = rng.choice(ANIMALS)
        if an in FLIERS:
            return ("Can %s fly?" % a_an(an),
                    "Yes, %s can fly." % a_an(an))
        return ("Can %s fly?" % a_an(an),
                "No, %s cannot fly." % a_an(an))
    if k == 7:
        an = rng.choice(ANIMALS)
        yes = an in SWIMMERS
        return ("Can %s swim?" % a_an(an),
                ("Yes, %s can swim." if yes else "No, %s cannot swim.")
                % a_an(an))
    if k == 8:
        h = Hero(rng)
        obj, color = rng.choice(OBJECTS), rng.choice(COLORS)
        return ("%s has %s %s. What color is the %s?" % (h.name,
                                                         a_an(color), obj,
                                                         obj),
                "The %s is %s." % (obj, color))
    if k == 9:
        h = Hero(rng)
        place = rng.choice(PLACES)
        return ("%s is at the %s. Where is %s?" % (h.name, place, h.name),
                "%s is at the %s." % (h.name, place))
    if k == 10:
        a, b = rng.randrange(6), rng.randrange(5)
        return ("What is %s plus %s?" % (NUMBERS[a], NUMBERS[b]),
                "%s plus %s is %s." % (cap(NUMBERS[a]), NUMBERS[b],
                                       NUMBERS[a + b]))
    if k == 11:
        an = rng.choice(ANIMALS)
        return (rng.choice(["Tell me a story about %s.",
                            "Can you tell me a story about %s?"])
                % a_an(an), story(rng, an))
    if k == 12:
        return (rng.choice(["Tell me a story.", "Tell me a short story.",
                            "Can you tell me a story?",
                            "Please tell me a story."]), story(rng))
    return (rng.choice(["Thank you!", "Thanks!", "Goodbye!", "Bye!"]),
            rng.choice(["You are welcome!", "Goodbye! Have a nice day."]))


def chat(rng):
    """A ChatML conversation: maybe a system turn, one or two exchanges."""
    msgs = []
    if rng.random() < 0.2:
        msgs.append(("system", rng.choice(SYSTEMS)))
    for _ in range(1 if rng.random() < 0.8 else 2):
        q, a = qa(rng)
        msgs += [("user", q), ("assistant", a)]
    return "".join("%s%s\n%s%s\n" % (IM_START, r, c, IM_END)
                   for r, c in msgs)


def documents(seed, n):
    """n documents, about a third stories and the rest chats."""
    rng = random.Random(seed)
    return [story(rng) if rng.random() < 0.35 else chat(rng)
            for _ in range(n)]


def words(docs):
    """The set of words (runs of letters) in docs, specials removed."""
    out = set()
    for d in docs:
        for s in SPECIALS:
            d = d.replace(s, " ")
        out.update(re.findall(r"[A-Za-z]+", d))
    return out


if __name__ == "__main__":
    import sys
    for d in documents(int(sys.argv[1]) if len(sys.argv) > 1 else 1, 8):
        print(d)
        print("----")
