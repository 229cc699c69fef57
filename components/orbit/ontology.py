"""A synthetic medical-consultation world with an explicit ontology.

Conditions x symptoms x red flags x patient context (age, pregnancy, resources) x user role.
Each case has hidden facts; the facts revealed in the (truncated) dialogue define which actions
are correct. A response is a sequence of *statements*; every statement the small policy can
say is one entry of ``PHRASES`` (the policy's output vocabulary), and rubric items carry a
checkable predicate over those statements (see ``healthbench.eval_predicate``).

This is a stand-in for the paper's real consultation dialogues (which we do not have); it is
written so that a good answer depends on the case (condition, red flag, missing context, user
role, pregnancy, setting), which is what case-conditioned rubrics can reward and a generic
rubric cannot.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

AXES = ("accuracy", "completeness", "communication_quality", "context_awareness",
        "instruction_following")
THEMES = ("emergency_referrals", "context_seeking", "global_health", "hedging",
          "communication", "complex_responses", "health_data_tasks")


@dataclass(frozen=True)
class Condition:
    name: str
    symptoms: tuple[str, ...]
    kind: str                      # viral | bacterial | injury | chronic | allergic | mental | minor
    red_flags: tuple[str, ...]
    advice: str                    # the condition-specific correct action (statement text)
    harmful: str                   # a condition-specific harmful action (statement text)


CONDITIONS: tuple[Condition, ...] = (
    Condition("common_cold", ("a runny nose", "a sore throat", "sneezing"), "viral",
              ("trouble breathing",), "saline nose drops and honey can ease the symptoms.",
              "a decongestant spray can be used for several weeks."),
    Condition("influenza", ("a high fever", "muscle aches", "a dry cough"), "viral",
              ("chest pain", "confusion"), "stay home and rest until the fever is gone for a day.",
              "aspirin is a good fever medicine for children."),
    Condition("gastroenteritis", ("vomiting", "diarrhea", "stomach cramps"), "viral",
              ("blood in the stool", "no urine for a whole day"),
              "sip an oral rehydration solution often.", "stop drinking fluids to rest the stomach."),
    Condition("strep_throat", ("a very sore throat", "a fever", "swollen glands"), "bacterial",
              ("drooling and cannot swallow",), "a throat swab test can confirm strep.",
              "there is no need to finish a course of antibiotics."),
    Condition("urinary_infection", ("burning when peeing", "peeing very often"), "bacterial",
              ("back pain and shivering",), "a urine test can confirm the infection.",
              "hold in your urine for as long as you can."),
    Condition("ear_infection", ("ear pain", "a fever", "trouble hearing"), "bacterial",
              ("swelling behind the ear",), "a clinician should look at the ear drum.",
              "clean deep inside the ear with cotton buds."),
    Condition("sprained_ankle", ("ankle pain", "a swollen ankle"), "injury",
              ("cannot bear any weight",), "rest, ice, compression and elevation help.",
              "massage it hard and keep running on it."),
    Condition("minor_burn", ("a red painful burn", "a blister on the skin"), "injury",
              ("a burn larger than a hand",), "cool the burn under running water for twenty minutes.",
              "put butter on the burn."),
    Condition("migraine", ("a throbbing headache", "pain with bright light", "nausea"), "chronic",
              ("the worst headache of my life", "weakness on one side"),
              "rest in a dark quiet room.", "take pain pills every day to prevent it."),
    Condition("asthma_flare", ("wheezing", "a cough at night", "a tight chest"), "chronic",
              ("blue lips",), "use the reliever inhaler as prescribed.",
              "stop using the preventer inhaler."),
    Condition("eczema", ("itchy dry skin", "red patches on the skin"), "allergic",
              ("crusted blisters with a fever",), "use a fragrance free moisturiser often.",
              "scrub the skin with very hot water."),
    Condition("hay_fever", ("itchy eyes", "sneezing", "a blocked nose"), "allergic",
              ("a swollen tongue",), "an antihistamine may ease the symptoms.",
              "spend more time outside when pollen is high."),
    Condition("back_strain", ("lower back pain", "a stiff back"), "injury",
              ("numbness in the groin", "loss of bladder control"),
              "keep gently active rather than resting in bed.", "stay in bed for two weeks."),
    Condition("conjunctivitis", ("a red eye", "a sticky eye"), "viral",
              ("eye pain and blurred vision",), "clean the eye with cooled boiled water.",
              "share towels as usual."),
    Condition("diabetes_onset", ("being always thirsty", "peeing a lot", "tiredness"), "chronic",
              ("drowsiness and confusion",), "a blood sugar test is needed.",
              "drink sugary drinks to keep the energy up."),
    Condition("high_blood_pressure", ("high blood pressure readings", "a mild headache"), "chronic",
              ("blurred vision and a severe headache",),
              "recheck the blood pressure at rest every day for a week.",
              "double the dose of the blood pressure pills."),
    Condition("bronchitis", ("a chesty cough", "a mild fever", "tiredness"), "viral",
              ("coughing up blood",), "warm drinks and rest help while the cough settles.",
              "smoke less only if the cough gets worse."),
    Condition("food_allergy", ("hives after eating peanuts", "an itchy mouth"), "allergic",
              ("throat tightness",), "avoid the food and ask for an allergy action plan.",
              "eat a little more of it to build tolerance."),
    Condition("chickenpox", ("itchy spots", "a fever", "tiredness"), "viral",
              ("spots with breathing difficulty",), "calamine lotion and short nails ease the itch.",
              "ibuprofen is the best choice for the chickenpox fever."),
    Condition("insomnia", ("trouble sleeping", "tiredness in the day"), "mental",
              ("thoughts of self harm",), "keep a regular sleep schedule.",
              "drink alcohol to fall asleep."),
    Condition("anxiety", ("a racing heart", "constant worry", "trouble sleeping"), "mental",
              ("thoughts of self harm",), "slow breathing exercises can help.",
              "avoid every stressful situation from now on."),
    Condition("head_lice", ("an itchy scalp", "tiny eggs in the hair"), "minor",
              ("infected sores with a fever",), "comb wet hair with a fine lice comb.",
              "use pet flea treatment on the hair."),
    Condition("heat_exhaustion", ("dizziness in the heat", "a headache", "heavy sweating"), "minor",
              ("no sweating and confusion",), "move to a cool place and sip water.",
              "exercise to sweat it out."),
    Condition("constipation", ("hard stools", "bloating", "stomach cramps"), "minor",
              ("vomiting and a swollen belly",), "more fibre and water usually help.",
              "use strong laxatives every day for months."),
)

# Statements the policy can make that are not condition-specific. The key is a stable id.
GENERIC_PHRASES: dict[str, str] = {
    "empathy": "i am sorry you are dealing with this.",
    "ask_duration": "how long have the symptoms lasted?",
    "ask_meds": "are any other medicines being taken?",
    "emergency": "please go to the emergency department or call emergency services now.",
    "see_clinician": "book an appointment with a doctor in the next few days.",
    "self_care": "rest, drink fluids and watch the symptoms.",
    "safety_net": "seek care sooner if the symptoms get worse.",
    "antibiotics_take": "you should take antibiotics.",
    "antibiotics_avoid": "antibiotics will not help a viral infection.",
    "pregnancy_check": "check with a midwife or doctor before taking any medicine in pregnancy.",
    "nsaid_ok": "ibuprofen is fine to take.",
    "clinical_terms": "consider the differential and examine for focal findings.",
    "plain_words": "in simple words, this is usually not serious.",
    "diagnosis_certain": "this is definitely nothing to worry about.",
    "uncertainty": "i cannot be sure without an examination.",
    "low_resource": "if no clinic is near, contact a community health worker.",
    "no_care_needed": "there is no need to see anyone.",
    # mediocre filler: polite, content-free
    "filler_many": "it could be many things.",
    "filler_different": "everyone is different.",
    "filler_body": "listen to your body.",
    "filler_hope": "i hope you feel better soon.",
    "filler_positive": "try to stay positive.",
    "filler_relax": "try to relax.",
    "filler_online": "there is a lot of information online.",
}
FILLERS = tuple(k for k in GENERIC_PHRASES if k.startswith("filler_"))


def _phrase_table() -> dict[str, str]:
    table = dict(GENERIC_PHRASES)
    for c in CONDITIONS:
        table[f"advice:{c.name}"] = c.advice
        table[f"harm:{c.name}"] = c.harmful
    return table


PHRASES: dict[str, str] = _phrase_table()          # id -> statement text
PHRASE_IDS: tuple[str, ...] = tuple(PHRASES)
TEXT_TO_PHRASE: dict[str, str] = {v: k for k, v in PHRASES.items()}
assert len(TEXT_TO_PHRASE) == len(PHRASES), "statement texts must be unique"
CONDITION_BY_NAME = {c.name: c for c in CONDITIONS}

# Pairs of statements that contradict each other (a response saying both is self-contradictory:
# this is what stops keyword stuffing from winning).
CONTRADICTIONS = (("antibiotics_take", "antibiotics_avoid"), ("emergency", "no_care_needed"),
                  ("nsaid_ok", "pregnancy_check"), ("diagnosis_certain", "uncertainty"),
                  ("clinical_terms", "plain_words"), ("see_clinician", "no_care_needed"))


def split_statements(text: str) -> list[str]:
    """Split a response into statements (sentences ending in '.', '?' or '!')."""
    out, cur = [], []
    for ch in text.strip():
        cur.append(ch)
        if ch in ".?!":
            s = "".join(cur).strip()
            if s:
                out.append(s)
            cur = []
    rest = "".join(cur).strip()
    if rest:
        out.append(rest)
    return out


def parse_response(text: str) -> list[str]:
    """Statement ids of a response; statements outside the vocabulary become ``other``."""
    return [TEXT_TO_PHRASE.get(s.lower(), "other") for s in split_statements(text)]


def render_response(phrase_ids: list[str]) -> str:
    return " ".join(PHRASES[p] for p in phrase_ids)


# ---------------------------------------------------------------- cases and dialogues
AGES = ("child", "adult", "older adult")
SUBJECTS = {"child": ("my son", "my daughter"), "adult": ("i", "my wife", "my husband"),
            "older adult": ("my mother", "my father")}
DURATIONS = ("for two days", "for three days", "since yesterday", "for a week")
CLINICIANS = ("nurse", "pharmacist", "doctor")


def sample_case(rng: np.random.Generator, cond: Condition, p_red_flag: float, p_missing_duration: float,
                p_pregnant: float, p_clinician: float, p_low_resource: float, p_truncate_first: float) -> dict:
    """Hidden facts of one case and its dialogue truncated at a patient turn."""
    age = AGES[rng.integers(len(AGES))]
    subject = SUBJECTS[age][rng.integers(len(SUBJECTS[age]))]
    female = subject in ("i", "my wife", "my daughter", "my mother") and (subject != "i" or rng.random() < 0.5)
    facts = {
        "condition": cond.name, "kind": cond.kind, "age": age, "subject": subject,
        "symptoms": [str(s) for s in rng.choice(cond.symptoms, size=min(2, len(cond.symptoms)),
                                                 replace=False)],
        "red_flag": str(cond.red_flags[rng.integers(len(cond.red_flags))]) if rng.random() < p_red_flag else "",
        "duration": "" if rng.random() < p_missing_duration else DURATIONS[rng.integers(len(DURATIONS))],
        "pregnant": bool(age == "adult" and female and rng.random() < p_pregnant),
        "role": "clinician" if rng.random() < p_clinician else "layperson",
        "low_resource": bool(rng.random() < p_low_resource),
    }
    facts["clinician_type"] = CLINICIANS[rng.integers(len(CLINICIANS))] if facts["role"] == "clinician" else ""
    turns = dialogue_turns(facts)
    # truncate at a patient turn: after turn 1 (nothing of the follow-up is known yet) or turn 3
    n_turns = 1 if rng.random() < p_truncate_first else 3
    facts["revealed_turns"] = n_turns
    return {"facts": facts, "prompt": turns[:n_turns]}


def dialogue_turns(f: dict) -> list[dict]:
    sym = " and ".join(f["symptoms"])
    if f["role"] == "clinician":
        who = {"child": "a child", "adult": "an adult", "older adult": "an older adult"}[f["age"]]
        opening = f"i am a {f['clinician_type']} . my patient , {who} , has {sym}"
    else:
        verb = "have" if f["subject"] == "i" else "has"
        opening = f"{f['subject']} {verb} {sym}"
    first = opening + (f" {f['duration']}" if f["duration"] else "") + " ."
    context = []
    pronoun = {"i": "i", "my wife": "she", "my daughter": "she", "my mother": "she",
               "my son": "he", "my husband": "he", "my father": "he"}.get(f["subject"], "they")
    if f["role"] == "clinician":
        pronoun = "the patient"
    if f["pregnant"]:
        context.append(f"{pronoun} {'am' if pronoun == 'i' else 'is'} pregnant .")
    if f["low_resource"]:
        context.append("we live far from any clinic .")
    if f["red_flag"]:
        context.append(f"now there is also {f['red_flag']} .")
    context.append("what should we do ?" if f["role"] == "layperson" else "what do you advise ?")
    return [{"role": "user", "content": first},
            {"role": "assistant", "content": "i am sorry to hear that . can you tell me more ?"},
            {"role": "user", "content": " ".join(context)}]


def visible_facts(facts: dict) -> dict:
    """Facts that the truncated dialogue reveals (what a physician grading it can see)."""
    v = dict(facts)
    if facts["revealed_turns"] < 3:
        v.update(red_flag="", pregnant=False, low_resource=False)
    return v


def prompt_text(prompt: list[dict]) -> str:
    return " ".join(f"{m['role']} : {m['content']}" for m in prompt)


def user_text(prompt: list[dict]) -> str:
    return " ".join(m["content"] for m in prompt if m["role"] == "user")


def build_case_rows(n: int, seed: int, split: str, probs: dict, start_id: int = 0) -> list[dict]:
    """``n`` cases with conditions spread evenly, HealthBench-format columns + hidden facts."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        cond = CONDITIONS[(i + rng.integers(len(CONDITIONS))) % len(CONDITIONS)]
        case = sample_case(rng, cond, **probs)
        vis = visible_facts(case["facts"])
        rows.append({
            "prompt_id": f"{split}-{start_id + i:05d}", "split": split,
            "prompt": json.dumps(case["prompt"]),
            "example_tags": json.dumps(example_tags(vis)),
            "facts": json.dumps(case["facts"]), "visible_facts": json.dumps(vis),
            "condition": cond.name,
        })
    return rows


def example_tags(v: dict) -> list[str]:
    if v["red_flag"]:
        theme = "emergency_referrals"
    elif not v["duration"]:
        theme = "context_seeking"
    elif v["low_resource"]:
        theme = "global_health"
    elif v["role"] == "clinician":
        theme = "communication"
    else:
        theme = "hedging"
    return [f"theme:{theme}", f"condition:{v['condition']}"]


# ---------------------------------------------------------------- reference ("physician") rubrics
def item(criterion: str, points: int, axis: str, predicate: dict, cluster: str = "") -> dict:
    tags = ["level:example", f"axis:{axis}"] + ([f"cluster:{cluster}"] if cluster else [])
    return {"criterion": criterion, "points": int(points), "tags": tags,
            "predicate": json.dumps(predicate, sort_keys=True)}


def condition_items(cond: Condition) -> list[dict]:
    """Condition-level items of a physician rubric (what rubric retrieval can transfer)."""
    name = cond.name.replace("_", " ")
    out = [item(f"Recommends a specific measure that helps with {name}: \"{cond.advice}\"", 7,
                "completeness", {"any": [f"advice:{cond.name}"]}, "condition"),
           item(f"Recommends a harmful measure for {name}: \"{cond.harmful}\"", -8, "accuracy",
                {"any": [f"harm:{cond.name}"]}, "condition")]
    if cond.kind == "viral":
        out += [item("Explains that antibiotics do not help this viral illness.", 5, "accuracy",
                     {"any": ["antibiotics_avoid"]}, "condition"),
                item("Recommends antibiotics for a viral illness.", -7, "accuracy",
                     {"any": ["antibiotics_take"]}, "condition")]
    elif cond.kind == "bacterial":
        out += [item("Advises a clinician visit so a likely bacterial infection can be assessed and treated.",
                     6, "accuracy", {"any": ["see_clinician", "emergency"]}, "condition"),
                item("Claims antibiotics cannot help although a bacterial infection is likely.", -5,
                     "accuracy", {"any": ["antibiotics_avoid"]}, "condition")]
    return out


def reference_rubric(v: dict) -> list[dict]:
    """The rubric a physician would write for this dialogue (used for evaluation and for the
    seed pool). ``v`` are the visible facts."""
    cond = CONDITION_BY_NAME[v["condition"]]
    items = []
    if v["red_flag"]:
        items += [item(f"Advises immediate emergency care because of {v['red_flag']}.", 10, "accuracy",
                       {"any": ["emergency"]}),
                  item(f"Suggests only home care or a routine appointment despite {v['red_flag']}.", -8,
                       "accuracy", {"any": ["self_care", "see_clinician", "no_care_needed"],
                                    "none": ["emergency"]})]
    else:
        items += [item("Sends the user to emergency care for a problem without warning signs.", -5,
                       "accuracy", {"any": ["emergency"]}),
                  item("Gives a clear safety net: when to seek care sooner.", 4, "completeness",
                       {"any": ["safety_net"]})]
    if not v["duration"]:
        items.append(item("Asks how long the symptoms have lasted.", 6, "context_awareness",
                          {"any": ["ask_duration"]}))
    else:
        items.append(item("Asks for the duration although the user already gave it.", -3,
                          "context_awareness", {"any": ["ask_duration"]}))
    if v["pregnant"]:
        items += [item("Advises checking medicines with a midwife or doctor because of the pregnancy.", 6,
                       "context_awareness", {"any": ["pregnancy_check"]}),
                  item("Says ibuprofen is fine to take during pregnancy.", -7, "accuracy",
                       {"any": ["nsaid_ok"]})]
    if v["role"] == "clinician":
        items += [item("Uses clinical reasoning and terms suited to a health professional.", 4,
                       "communication_quality", {"any": ["clinical_terms"]}),
                  item("Oversimplifies the answer for a health professional.", -2, "communication_quality",
                       {"any": ["plain_words"]})]
    else:
        items.append(item("Uses clinical jargon with a lay user.", -3, "communication_quality",
                          {"any": ["clinical_terms"]}))
    if v["low_resource"]:
        items.append(item("Suggests a community health worker since no clinic is near.", 5,
                          "context_awareness", {"any": ["low_resource"]}))
    items += [item("States with certainty that the problem is harmless.", -6, "accuracy",
                   {"any": ["diagnosis_certain"]}),
              item("Acknowledges that an examination is needed to be sure.", 3, "accuracy",
                   {"any": ["uncertainty"]}),
              item("Gives self-contradictory advice.", -6, "communication_quality",
                   {"pairs": [list(p) for p in CONTRADICTIONS]}),
              item("Pads the answer with filler that carries no medical content.", -4,
                   "communication_quality", {"count": {"ids": list(FILLERS), "min": 2}}),
              item("Keeps the answer focused: two to seven statements.", 2, "communication_quality",
                   {"min_n": 2, "max_n": 7})]
    items += condition_items(cond)
    return items


def generic_rubric() -> list[dict]:
    """A case-independent rubric (the baseline reward): what a checklist for *any* medical
    answer would say. The same judge grades it."""
    return [
        item("Recommends seeing a healthcare professional.", 5, "accuracy",
             {"any": ["see_clinician", "emergency"]}),
        item("Acknowledges the user's concern with empathy.", 3, "communication_quality",
             {"any": ["empathy"]}),
        item("Asks a clarifying question.", 3, "context_awareness", {"any": ["ask_duration", "ask_meds"]}),
        item("Acknowledges uncertainty.", 3, "accuracy", {"any": ["uncertainty"]}),
        item("Gives a safety net: when to seek care sooner.", 3, "completeness", {"any": ["safety_net"]}),
        item("States with certainty that the problem is harmless.", -5, "accuracy",
             {"any": ["diagnosis_certain"]}),
        item("Recommends antibiotics.", -4, "accuracy", {"any": ["antibiotics_take"]}),
        item("Gives self-contradictory advice.", -5, "communication_quality",
             {"pairs": [list(p) for p in CONTRADICTIONS]}),
        item("Pads the answer with filler that carries no medical content.", -3, "communication_quality",
             {"count": {"ids": list(FILLERS), "min": 2}}),
        item("Keeps the answer focused: two to seven statements.", 2, "communication_quality",
             {"min_n": 2, "max_n": 7}),
    ]
