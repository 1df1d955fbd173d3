"""Notes environment: tasks over a small notebook served by ``mcp_gym.servers.notes``.

Three task kinds, generated deterministically (no data files):

* ``store`` — save given facts as notes with given titles and a tag; the verifier checks the stored notes.
* ``question`` — answer a question whose answer sits in one of ~12-18 pre-seeded notes (needs search + read).
* ``tag`` — tag exactly the notes that mention a person; the verifier checks the tags of every note.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from mcp_gym.envs._common import call, cycle_tasks, submit, task_lookup
from mcp_gym.tasks import Task, normalise_answer

__all__ = ["SERVER", "MAX_STEPS", "SUCCESS_THRESHOLD", "OBSERVE_RESOURCES", "generate_tasks", "verify"]

SERVER = "notes"
MAX_STEPS = 30
SUCCESS_THRESHOLD = 1.0
OBSERVE_RESOURCES: list[str] = ["notes://index"]
N_TASKS = 150
KINDS = ("store", "question", "tag")

FIRST = (
    "Ada", "Bruno", "Chloe", "Dario", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Keiko", "Luca", "Maya",
    "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tomas", "Umar", "Yannick", "Wen", "Ximena", "Yusuf", "Zoe",
    "Amir", "Bianca", "Cyrus", "Dalia"
)
LAST = (
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Ferreira", "Haddad", "Kowalski", "Brennan", "Iyer", "Castillo",
    "Larsen", "Mbeki", "Rossi", "Schmidt", "Vargas", "Yilmaz", "Nakamura", "Petrov", "Duarte", "Abbott", "Quispe",
    "Ekberg", "Fontaine", "Gallo", "Horvat", "Jansen", "Kimura", "Lopez", "Marsh"
)
CITIES = (
    "Lisbon", "Oslo", "Nairobi", "Osaka", "Denver", "Lyon", "Krakow", "Porto", "Dublin", "Seoul", "Austin", "Bergen",
    "Tunis", "Quito", "Hanoi", "Perth", "Leeds", "Turin", "Graz", "Malmo"
)
TEAMS = ("Finance", "Design", "Platform", "Sales", "Research", "Support", "Legal", "Marketing", "Data", "Security")
PROJECTS = (
    "Falcon", "Heron", "Juniper", "Kestrel", "Lantern", "Marlin", "Nimbus", "Orchid", "Pylon", "Quartz", "Raven",
    "Sable", "Tundra", "Umber", "Vortex", "Willow", "Yarrow", "Zephyr", "Aurora", "Basalt"
)
TOPICS = (
    "budget review",
    "hiring plan",
    "roadmap planning",
    "security audit",
    "launch checklist",
    "vendor selection",
    "office move",
    "quarterly goals",
    "incident retro",
    "pricing update",
    "onboarding revamp",
    "data migration",
)
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
    "December"
)
HOTELS = ("Hotel Aster", "Harbour Inn", "Grand Meridian", "Casa Verde", "The Linden", "Nordlys Lodge", "Park Plaza")
CHANNELS = ("email", "phone", "chat")
STATUSES = ("on track", "at risk", "blocked", "paused", "nearly done")
DECISIONS = ("approved", "postponed to next quarter", "needs a second review", "cancelled", "moved to the backlog")
WORDS = ("amber", "cobalt", "maple", "granite", "velvet", "copper", "hollow", "silver", "crimson", "lunar")
ANIMALS = ("fox", "otter", "lynx", "heron", "badger", "falcon", "moose", "wren")
TAGS = ("facts", "onboarding", "ops", "reference", "follow-up", "priority", "review", "team")


def note_matches(query: str, title: str, content: str, tags: Sequence[str]) -> bool:
    """Search rule shared with the server: every whitespace-separated query term occurs (case-insensitively) in
    the note's title, content or tags."""
    haystack = " ".join([title, content, *tags]).casefold()
    terms = query.casefold().split()
    return bool(terms) and all(t in haystack for t in terms)


# -- notebook generation ----------------------------------------------------------------------------------------
def _date(rng: random.Random) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(MONTHS)}"


def _code(rng: random.Random, n: int = 6) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(n))


def _people(rng: random.Random, n: int) -> list[str]:
    """``n`` full names whose first names and last names are all distinct (so a name search is unambiguous)."""
    return [f"{f} {ln}" for f, ln in zip(rng.sample(FIRST, n), rng.sample(LAST, n), strict=True)]


def _note(title: str, content: str, tags: Sequence[str], questions: Sequence[tuple[str, str, str]] = ()) -> dict:
    """A seeded note plus the questions it can answer: ``(question, answer, search query)``."""
    return {"title": title, "content": content, "tags": list(tags), "questions": list(questions)}


def _contact(rng: random.Random, name: str) -> dict:
    first, last = name.split()
    team, city = rng.choice(TEAMS), rng.choice(CITIES)
    phone = f"+1-555-{rng.randint(1000, 9999)}"
    content = (
        f"{name} works on the {team} team in our {city} office. Phone: {phone}. "
        f"Email: {first.lower()}.{last.lower()}@example.com. Best reached by {rng.choice(CHANNELS)}."
    )
    return _note(
        f"Contact: {name}",
        content,
        ["contact", team.lower()],
        [(f"What is the phone number of {name}?", phone, name), (f"In which city is {name}'s office?", city, name)],
    )


def _project(rng: random.Random, code: str, lead: str) -> dict:
    deadline = _date(rng)
    content = (
        f"Project {code} is led by {lead}. Budget: {rng.randint(10, 90) * 1000} EUR. Deadline: {deadline}. "
        f"Status: {rng.choice(STATUSES)}. Repository: git.example.com/{code.lower()}."
    )
    q = f"Project {code}"
    return _note(
        q,
        content,
        ["project"],
        [(f"Who leads project {code}?", lead, q), (f"What is the deadline of project {code}?", deadline, q)],
    )


def _meeting(rng: random.Random, topic: str, attendees: Sequence[str]) -> dict:
    room = f"{rng.randint(1, 9)}{rng.choice('ABCDE')}"
    date = _date(rng)
    content = (
        f"Meeting about the {topic} on {date} in room {room}. Attendees: {', '.join(attendees[:-1])} and "
        f"{attendees[-1]}. Decision: {rng.choice(DECISIONS)}."
    )
    return _note(
        f"Meeting: {topic} ({date})",
        content,
        ["meeting"],
        [(f"In which room was the {topic} meeting held? Answer with the room only.", room, topic)],
    )


def _trip(rng: random.Random, city: str) -> dict:
    flight = f"{rng.choice(['TP', 'SK', 'KQ', 'JL', 'UA', 'AF', 'LO'])}{rng.randint(100, 999)}"
    ref = _code(rng)
    content = (
        f"Flight {flight} to {city} departs on {_date(rng)}. Hotel: {rng.choice(HOTELS)}. Booking reference: {ref}."
    )
    q = f"Trip to {city}"
    return _note(
        q,
        content,
        ["travel"],
        [
            (f"What is the booking reference for the trip to {city}?", ref, q),
            (f"Which flight goes to {city}? Answer with the flight number only.", flight, q),
        ],
    )


def _notebook(rng: random.Random, n_notes: int) -> tuple[list[dict], list[str]]:
    """About ``n_notes`` notes of mixed kinds with unique titles; also returns the people mentioned."""
    people = _people(rng, 10)
    notes: list[dict] = []
    n_contacts, n_projects, n_meetings = 4, 3, 3
    n_trips = max(1, n_notes - n_contacts - n_projects - n_meetings)
    notes += [_contact(rng, p) for p in people[:n_contacts]]
    notes += [_project(rng, c, rng.choice(people)) for c in rng.sample(PROJECTS, n_projects)]
    notes += [_meeting(rng, t, rng.sample(people, 3)) for t in rng.sample(TOPICS, n_meetings)]
    notes += [_trip(rng, c) for c in rng.sample(CITIES, n_trips)]
    rng.shuffle(notes)
    return notes, people


def _public(notes: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The notes as the server stores them (without the generator's question bookkeeping)."""
    return [{"title": n["title"], "content": n["content"], "tags": list(n["tags"])} for n in notes]


# -- task kinds ------------------------------------------------------------------------------------------------
def _fact_pool(rng: random.Random) -> list[tuple[str, str, str]]:
    """Candidate facts ``(title, sentence, value)`` with distinct subjects."""
    people = _people(rng, 3)
    city, project = rng.choice(CITIES), rng.choice(PROJECTS)
    pw = f"{rng.choice(WORDS)}-{rng.choice(ANIMALS)}-{rng.randint(10, 99)}"
    locker, spot = str(rng.randint(1000, 9999)), f"P{rng.randint(1, 4)}-{rng.randint(10, 60)}"
    ip = f"10.{rng.randint(1, 250)}.{rng.randint(1, 250)}.{rng.randint(2, 250)}"
    birthday = _date(rng)
    (n0, n1, n2) = people
    return [
        (f"Wifi {city}", f"The wifi password for the {city} office is {pw}.", pw),
        (f"Locker {n0}", f"{n0}'s locker code is {locker}.", locker),
        (f"Parking {n1}", f"{n1} parks in spot {spot}.", spot),
        (f"Server {project}", f"The {project} staging server is at {ip}.", ip),
        (f"Birthday {n2}", f"{n2}'s birthday is on {birthday}.", birthday),
    ]


def _distinct_values(facts: Sequence[tuple[str, str, str]]) -> bool:
    vals = [normalise_answer(v) for _, _, v in facts]
    return all(a not in b for i, a in enumerate(vals) for j, b in enumerate(vals) if i != j)


def _store_task(rng: random.Random, task_id: str, split: str) -> Task:
    distractors, _ = _notebook(rng, rng.randint(10, 12))
    distractors = distractors[: rng.randint(3, 6)]
    while True:
        facts = rng.sample(_fact_pool(rng), rng.randint(2, 4))
        if _distinct_values(facts):
            break
    tag = rng.choice(TAGS)
    lines = "\n".join(f"- {title}: {sentence}" for title, sentence, _ in facts)
    prompt = (
        "Save each fact below as its own note. Use exactly the given title, put the fact in the note's content "
        f"and tag the note '{tag}'. Submit 'done' when finished.\n{lines}"
    )
    solution = [call("create_note", title=t, content=s, tags=[tag]) for t, s, _ in facts]
    data = {
        "kind": "store",
        "notes": _public(distractors),
        "tag": tag,
        "facts": [{"title": t, "sentence": s, "value": v} for t, s, v in facts],
    }
    return Task(task_id, prompt, split, (*solution, submit("done")), None, data)


def _question_task(rng: random.Random, task_id: str, split: str) -> Task:
    notes, _ = _notebook(rng, rng.randint(12, 18))
    note = rng.choice(notes)
    question, answer, query = rng.choice(note["questions"])
    prompt = (
        f"{question} The answer is written in one of your notes: search them and submit the exact value as "
        "written in the note."
    )
    solution = (call("search_notes", query=query), call("read_note", title=note["title"]), submit(answer))
    data = {"kind": "question", "notes": _public(notes), "source": note["title"]}
    return Task(task_id, prompt, split, solution, answer, data)


def _tag_task(rng: random.Random, task_id: str, split: str) -> Task:
    while True:
        notes, people = _notebook(rng, rng.randint(12, 18))
        mentions = {p: [n["title"] for n in notes if note_matches(p, n["title"], n["content"], ())] for p in people}
        candidates = [p for p, titles in mentions.items() if 2 <= len(titles) <= 5]
        if candidates:
            break
    person = rng.choice(candidates)
    tag = rng.choice(TAGS)
    targets = mentions[person]
    prompt = (
        f"Add the tag '{tag}' to every note that mentions {person}, and to no other note. Keep the notes' "
        "existing tags. Submit 'done' when finished."
    )
    solution = (
        call("search_notes", query=person),
        *(call("tag_note", title=t, tags=[tag]) for t in targets),
        submit("done"),
    )
    data = {"kind": "tag", "notes": _public(notes), "tag": tag, "person": person, "targets": targets}
    return Task(task_id, prompt, split, solution, None, data)


_MAKERS = {"store": _store_task, "question": _question_task, "tag": _tag_task}


def generate_tasks(seed: int = 0) -> list[Task]:
    """The Notes task set: :data:`N_TASKS` tasks cycling through :data:`KINDS`, reproducible from ``seed``.

    Every 5th task is in the ``"test"`` split, the rest in ``"train"``.
    """
    return cycle_tasks(SERVER, seed, N_TASKS, KINDS, _MAKERS)


task_by_id = task_lookup(generate_tasks)


# -- verification ----------------------------------------------------------------------------------------------
def _find(notes: Sequence[Mapping[str, Any]], title: str) -> Mapping[str, Any] | None:
    key = normalise_answer(title)
    return next((n for n in notes if normalise_answer(n.get("title")) == key), None)


def _has_tag(note: Mapping[str, Any], tag: str) -> bool:
    return tag.casefold() in {str(t).casefold() for t in note.get("tags", ())}


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """Reward in [0, 1] for ``task`` given the final ``answer`` and the server's ``mcp_gym_state`` snapshot.

    * ``question``: 1 iff the normalised answer equals the expected one.
    * ``store``: fraction of facts stored in a note with the given title, the tag, the fact's value in its content
      and no other fact's value in it.
    * ``tag``: (correctly tagged target notes - wrongly tagged other notes) / number of targets, floored at 0.
    """
    data = task.data
    notes = list(state.get("notes", ()))
    kind = data.get("kind")
    if kind == "question":
        return float(task.answer is not None and normalise_answer(answer) == normalise_answer(task.answer))
    if kind == "store":
        facts = data["facts"]
        values = [normalise_answer(f["value"]) for f in facts]
        ok = 0
        for i, fact in enumerate(facts):
            note = _find(notes, fact["title"])
            if note is None or not _has_tag(note, data["tag"]):
                continue
            content = normalise_answer(note.get("content"))
            if values[i] in content and not any(v in content for j, v in enumerate(values) if j != i):
                ok += 1
        return ok / len(facts)
    if kind == "tag":
        targets = {normalise_answer(t) for t in data["targets"]}
        tagged = {normalise_answer(n.get("title")) for n in notes if _has_tag(n, data["tag"])}
        score = len(tagged & targets) - len(tagged - targets)
        return max(0.0, score / len(targets))
    return 0.0
