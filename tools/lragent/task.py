#!/usr/bin/env python3
"""Seeded synthetic two-hop QA task for the LRAgent plan/action/reflect pipeline.

Each instance is a set of records about invented people, cities and countries
(nothing a pretrained model can know) and a question that needs two look-ups:

    People:
    - Dara Velkin works in Ostrava.
    - Dara Velkin lives in Brimholt.
    ...
    Places:
    - Ostrava is a city in Quenland.
    ...
    Question: In which country does Dara Velkin work?

The agents write one line each on a single growing trajectory (the assistant
turn), AutoAct style (LRAgent App. C.1): the controller appends the line's
label (a rule-based insert, as AutoAct's "Thought 1:"), the role's agent
generates the rest of the line:

    role     label    generated
    plan     Plan:    " find where Dara Velkin works."
    action   Action:  " Dara Velkin works in Ostrava."
    plan     Plan:    " find the country of Ostrava."
    action   Action:  " Ostrava is in Quenland."
    reflect  Answer:  " Quenland"

Every line ends with the newline token, the role's end marker: an agent stops
when it emits it (it is the stop token), and the controller appends it.

Only the standard library is needed here (tests import this file without JAX
or a tokenizer). `python3 tools/lragent/task.py --n 3 --seed 0` prints
instances; `--json` dumps them.
"""
import argparse
import json
import random
import re
import sys

# The order in which the roles write the trajectory's lines.
ROLE_SEQUENCE = ("plan", "action", "plan", "action", "reflect")
ROLES = ("plan", "action", "reflect")
# The label the controller inserts before each role's line.
LABELS = {"plan": "Plan:", "action": "Action:", "reflect": "Answer:"}

# Relations a person has to a city: (record verb, question phrase, plan phrase).
RELATIONS = {
    "works": ("works in", "In which country does {p} work?", "find where {p} works."),
    "lives": ("lives in", "In which country does {p} live?", "find where {p} lives."),
    "born": ("was born in", "In which country was {p} born?", "find where {p} was born."),
}
REL_KEYS = ("works", "lives", "born")

SYSTEM = ("You answer questions from records. Work in steps, one line each: "
          "a Plan line, an Action line that copies the record it needs, and at "
          "the end a line 'Answer: COUNTRY'.")

# Invented name parts: no real people or places, so the answer must come from
# the records.
_FIRST = ("Dara", "Ivo", "Maren", "Tobin", "Elsa", "Quill", "Rena", "Osric", "Lina", "Bram",
          "Tessa", "Corin", "Nadia", "Pello", "Ysolde", "Kiran", "Mirel", "Aldo", "Sunni",
          "Favel", "Orla", "Jory", "Wenna", "Hollis")
_LAST_A = ("Vel", "Mor", "Kes", "Dal", "Brin", "Tor", "Hal", "Pem", "Rud", "Sol", "Gar", "Lun")
_LAST_B = ("kin", "wick", "dane", "mont", "ley", "ford", "ric", "sby", "holt", "ner")
_CITY_A = ("Ost", "Brim", "Kel", "Var", "Dun", "Pell", "Tal", "Mir", "Quor", "Sed", "Ylm",
           "Carr", "Fen", "Gol", "Hask", "Nor")
_CITY_B = ("rava", "holt", "brun", "mark", "wick", "aven", "dell", "ora", "stad", "emont")
_COUNTRY_A = ("Quen", "Vald", "Oster", "Marr", "Tel", "Bors", "Kald", "Ruth", "Esk",
              "Dorn", "Sav", "Lom")
_COUNTRY_B = ("land", "ia", "ova", "mark", "ar", "enia")


def _unique(rng, make, n, taken):
    out = []
    while len(out) < n:
        x = make(rng)
        if x not in taken:
            taken.add(x)
            out.append(x)
    return out


def _person(rng):
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST_A)}{rng.choice(_LAST_B)}"


def make_instance(seed, index, n_people=3, n_cities=6):
    """One instance (a dict of plain data), a pure function of (seed, index)."""
    rng = random.Random(seed * 1_000_003 + index)
    taken = set()
    people = _unique(rng, _person, n_people, taken)
    # Within an instance, no two cities (countries) share their first part, so
    # a name is told apart from its first syllable.
    cities = [a + rng.choice(_CITY_B) for a in rng.sample(_CITY_A, n_cities)]
    countries = [a + rng.choice(_COUNTRY_B) for a in rng.sample(_COUNTRY_A, n_cities)]  # one per city
    city_country = dict(zip(cities, countries))
    # Each person has every relation, to distinct cities.
    facts = {p: dict(zip(REL_KEYS, rng.sample(cities, len(REL_KEYS)))) for p in people}
    person = rng.choice(people)
    rel = rng.choice(REL_KEYS)
    person_lines = [f"{p} {RELATIONS[r][0]} {c}." for p in people for r, c in facts[p].items()]
    place_lines = [f"{c} is a city in {k}." for c, k in city_country.items()]
    rng.shuffle(person_lines)
    rng.shuffle(place_lines)
    city = facts[person][rel]
    country = city_country[city]
    return {
        "seed": seed,
        "index": index,
        "people": facts,                 # person -> relation -> city
        "city_country": city_country,    # city -> country
        "person_lines": person_lines,
        "place_lines": place_lines,
        "person": person,
        "relation": rel,
        "question": RELATIONS[rel][1].format(p=person),
        "city": city,
        "answer": country,
    }


def documents_text(inst):
    return ("People:\n" + "".join(f"- {l}\n" for l in inst["person_lines"]) +
            "Places:\n" + "".join(f"- {l}\n" for l in inst["place_lines"]))


# The worked examples of the `shots` variant: instances of a seed no
# evaluation or training run uses, smaller (2 people, 3 cities).
DEMO_SEED = 9_999


def demo_instance(k):
    return make_instance(DEMO_SEED, k, n_people=2, n_cities=3)


def _user_text(inst):
    return documents_text(inst) + "Question: " + inst["question"]


def context_text(inst, shots=0):
    """The shared context: ChatML system + user turn, and the opened assistant
    turn that the agents' lines fill. Tokenize it as a whole (control tokens
    recognised, no BOS: SmolLM2 declares none).

    shots > 0 puts that many worked examples before the question, each a user
    turn (records and question) and the assistant turn of its gold lines:
    the untrained model then follows the line format (the `shots` variant of
    the LRAgent protocol, docs/benchmarks.md)."""
    demos = ""
    for k in range(shots):
        d = demo_instance(k)
        lines = "".join(line + "\n" for _, line in gold_lines(d))
        demos += f"<|im_start|>user\n{_user_text(d)}<|im_end|>\n<|im_start|>assistant\n{lines}<|im_end|>\n"
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n{demos}"
            f"<|im_start|>user\n{_user_text(inst)}<|im_end|>\n<|im_start|>assistant\n")


def gold_steps(inst):
    """[(role, label, generated)] of the gold trajectory (no newlines)."""
    p, c, k = inst["person"], inst["city"], inst["answer"]
    verb = RELATIONS[inst["relation"]][0]
    gen = [" " + RELATIONS[inst["relation"]][2].format(p=p), f" {p} {verb} {c}.",
           f" find the country of {c}.", f" {c} is in {k}.", f" {k}"]
    return [(r, LABELS[r], g) for r, g in zip(ROLE_SEQUENCE, gen)]


def gold_lines(inst):
    """[(role, line)] of the gold trajectory: label + generated, no newline."""
    return [(r, l + g) for r, l, g in gold_steps(inst)]


def trajectory_ids(encode, inst, newline_id, shots=0):
    """Token ids of the gold trajectory, built the way the pipeline builds it:
    the context tokenized whole, then per line the label tokenized alone, the
    generated part tokenized alone, the newline id. Returns (ids, spans) with
    spans = [(role, start, end)], ids[start:end] being what the role
    generates (its tokens and the newline it stops on)."""
    ids = list(encode(context_text(inst, shots)))
    spans = []
    for role, label, gen in gold_steps(inst):
        ids += list(encode(label))
        start = len(ids)
        ids += list(encode(gen)) + [newline_id]
        spans.append((role, start, len(ids)))
    return ids, spans


def normalize(s):
    """Lower case, punctuation and surrounding space dropped, spaces collapsed."""
    s = re.sub(r"[^\w\s]", " ", s.lower())
    return " ".join(s.split())


def extract_answer(final_text):
    """The answer in the reflect line (label + generated): what follows the
    last 'Answer:', else the whole line."""
    text = final_text.strip()
    m = list(re.finditer(r"answer\s*:", text, flags=re.IGNORECASE))
    if m:
        text = text[m[-1].end():]
    text = text.strip().split("\n")[0]
    return text


def is_correct(inst, final_text):
    return normalize(extract_answer(final_text)) == normalize(inst["answer"])


def _unique_after(lines, prefix, hop):
    """What follows `prefix` on the one line that starts with it (None if none)."""
    found = [line[len(prefix):].rstrip(".") for line in lines if line.startswith(prefix)]
    assert len(found) <= 1, f"two records answer the {hop} hop"
    return found[0] if found else None


def solve_from_text(inst):
    """Answers the question from the rendered records only (not from the
    structured data): used by the tests as an independent check."""
    rel_verb = RELATIONS[inst["relation"]][0]
    city = _unique_after(inst["person_lines"], f"{inst['person']} {rel_verb} ", "first")
    if city is None:
        return None
    return _unique_after(inst["place_lines"], f"{city} is a city in ", "second")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first instance index")
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print the instances as JSON lines")
    ap.add_argument("--shots", type=int, default=0, help="worked examples before the question")
    args = ap.parse_args(argv)
    for i in range(args.start, args.start + args.n):
        inst = make_instance(args.seed, i)
        if args.json:
            print(json.dumps(inst))
            continue
        print(context_text(inst, args.shots), end="")
        for role, line in gold_lines(inst):
            print(f"{line}    <- {role}")
        print("-" * 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
