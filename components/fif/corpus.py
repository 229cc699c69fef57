"""SynthWiki: a seeded knowledge graph rendered as hyperlinked pages, plus multi-hop queries.

Every page is a document with components (two paragraphs, an infobox table, an "image" that
is textualised as caption + tags, since no offline image encoder exists). Entity mentions are
hyperlinks, which become the navigational edges of the graph. Distractors reproduce the two
failure modes the paper targets: surface-similar cues (namesakes, near-duplicate "replica"
pages, near-miss sentences) and under-specified hops (the bridge entity is only known after
the previous hop). Their rates live in the config and are frozen before any run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.common.io import write_json_atomic, write_table

SYL = ["ka", "lo", "mi", "ren", "tas", "vo", "dri", "bel", "sun", "mar", "quin", "zel", "hol",
       "pra", "nev", "tor", "li", "sa", "gor", "fen", "ast", "bru", "cal", "dor", "ep", "ix"]
INDUSTRIES = ["shipping", "software", "textile", "mining", "publishing", "aviation"]
OCCUPATIONS = ["painter", "engineer", "chemist", "poet", "architect", "banker"]
MATERIALS = ["bronze", "granite", "marble", "limestone", "copper", "sandstone", "steel"]
COLOURS = ["red", "green", "blue", "white", "black", "golden", "grey"]
KINDS = ["statue", "tower", "fountain", "obelisk", "arch"]
COUNTRIES = ["Valdoria", "Estmark", "Norvania", "Quelland"]


def _word(rng, n_syl: int) -> str:
    return "".join(rng.choice(SYL, n_syl)).capitalize()


def _unique_names(rng, n: int, make) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        name = make()
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


@dataclass
class Page:
    title: str
    kind: str
    summary: str
    components: list[tuple[str, str, list[int]]] = field(default_factory=list)  # (kind, text, links)


def generate(cfg, seed: int) -> dict:
    """Pages, queries (text only), qrels and GT hop chains for one corpus seed."""
    rng = np.random.default_rng(seed)
    c = cfg
    cities = _unique_names(rng, c.n_cities, lambda: _word(rng, 2) + rng.choice([" City", "burg", "ford", " Port"]))
    persons = _unique_names(rng, c.n_persons, lambda: f"{_word(rng, 2)} {_word(rng, 2)}")
    # namesakes: some persons take the full name of an earlier person (a different entity)
    originals = list(range(c.n_persons // 2))     # the first half are never copies
    for i in range(c.n_persons // 2, c.n_persons):
        if originals and rng.random() < c.namesake_rate:  # each original has at most one namesake
            persons[i] = persons[originals.pop(int(rng.integers(0, len(originals))))]
    orgs = _unique_names(rng, c.n_orgs, lambda: _word(rng, 2) + rng.choice([" Labs", " Works", " Group", " Holdings"]))
    n_land = min(c.n_landmarks, c.n_cities)
    lands = _unique_names(rng, n_land, lambda: f"The {_word(rng, 2)} {rng.choice(KINDS).capitalize()}")

    # document ids: cities, persons, orgs, landmarks, then replicas
    doc = {}
    n = 0
    for kind, names in (("city", cities), ("person", persons), ("org", orgs), ("landmark", lands)):
        for i in range(len(names)):
            doc[(kind, i)] = n
            n += 1
    land_city = rng.permutation(c.n_cities)[:n_land]           # each landmark in its own city
    free_cities = [i for i in range(c.n_cities) if i not in set(land_city.tolist())]
    replicas = []                                               # (original landmark, city)
    for li in range(n_land):
        if free_cities and rng.random() < c.replica_rate:
            replicas.append((li, free_cities.pop(int(rng.integers(0, len(free_cities))))))
    for r in range(len(replicas)):
        doc[("replica", r)] = n
        n += 1
    city_land = {int(ci): ("landmark", li) for li, ci in enumerate(land_city)}
    city_land.update({ci: ("replica", r) for r, (_, ci) in enumerate(replicas)})

    p_born = rng.integers(0, c.n_cities, c.n_persons)
    o_founder = rng.integers(0, c.n_persons, c.n_orgs)
    o_hq = rng.integers(0, c.n_cities, c.n_orgs)
    pick = lambda k: int(rng.integers(0, k))  # noqa: E731
    land_attr = {("landmark", i): (rng.choice(KINDS), rng.choice(MATERIALS), rng.choice(COLOURS)) for i in range(n_land)}
    for r, (li, _) in enumerate(replicas):  # a replica copies the kind, but not the material or colour
        kind, mat, col = land_attr[("landmark", li)]
        land_attr[("replica", r)] = (kind, rng.choice([m for m in MATERIALS if m != mat]),
                                     rng.choice([x for x in COLOURS if x != col]))
    land_name = lambda key: lands[key[1]] if key[0] == "landmark" else lands[replicas[key[1]][0]] + " Replica"  # noqa: E731
    land_city_of = lambda key: int(land_city[key[1]]) if key[0] == "landmark" else replicas[key[1]][1]  # noqa: E731

    pages: list[Page | None] = [None] * n
    for i, name in enumerate(cities):
        land = city_land.get(i)
        twin, far = pick(c.n_cities), ("landmark", pick(n_land))
        p1 = f"{name} is a city in {rng.choice(COUNTRIES)}."
        links1 = []
        twin_s, far_s = f"{name} is twinned with {cities[twin]}.", f"Visitors to {name} often travel to see {land_name(far)}."
        if rng.random() < c.nearmiss_rate:  # the near miss is read before the true relation
            p1, links1, p2, links2 = f"{p1} {twin_s}", [doc[("city", twin)]], far_s, [doc[far]]
        else:
            p2, links2 = f"{twin_s} {far_s}", [doc[("city", twin)], doc[far]]
        if land is not None:
            p1 += f" {name} is home to {land_name(land)}."
            links1 = links1 + [doc[land]]
        pages[doc[("city", i)]] = Page(name, "city", f"{name} is a city.", [
            ("paragraph", p1, links1), ("paragraph", p2, links2),
            ("table", f"Infobox of {name}. population: {int(rng.integers(10, 900)) * 1000}. country: {rng.choice(COUNTRIES)}.", []),
            ("image", f"Image of {name}. Tags: skyline, river, colour: {rng.choice(COLOURS)}.", [])])
    for i, name in enumerate(persons):
        occ, lived, mate = rng.choice(OCCUPATIONS), pick(c.n_cities), pick(c.n_persons)
        city = int(p_born[i])
        born_s, lived_s = f"{name} was born in {cities[city]}.", f"{name} lived in {cities[lived]}."
        mate_s = f"{name} worked with {persons[mate]}."
        if rng.random() < c.nearmiss_rate:  # the near miss is read before the true relation
            p1, links1 = f"{name} is a {occ}. {lived_s} {born_s}", [doc[("city", lived)], doc[("city", city)]]
            p2, links2 = mate_s, [doc[("person", mate)]]
        else:
            p1, links1 = f"{name} is a {occ}. {born_s}", [doc[("city", city)]]
            p2, links2 = f"{lived_s} {mate_s}", [doc[("city", lived)], doc[("person", mate)]]
        pages[doc[("person", i)]] = Page(name, "person", f"{name} is a {occ}.", [
            ("paragraph", p1, links1), ("paragraph", p2, links2),
            ("table", f"Infobox of {name}. born: {int(rng.integers(1900, 1990))}. occupation: {occ}.", []),
            ("image", f"Image of {name}. Tags: portrait, colour: {rng.choice(COLOURS)}.", [])])
    for i, name in enumerate(orgs):
        ind, hired, office = rng.choice(INDUSTRIES), pick(c.n_persons), pick(c.n_cities)
        f, hq = int(o_founder[i]), int(o_hq[i])
        found_s, hq_s = f"{name} was founded by {persons[f]}.", f"{name} is headquartered in {cities[hq]}."
        hired_s, office_s = f"{name} once hired {persons[hired]}.", f"{name} opened an office in {cities[office]}."
        rel = [(found_s, doc[("person", f)]), (hq_s, doc[("city", hq)])]
        if rng.random() < c.nearmiss_rate:  # a near miss for each relation is read before it
            rel = [(hired_s, doc[("person", hired)]), rel[0], (office_s, doc[("city", office)]), rel[1]]
            p2, links2 = f"{name} has offices abroad.", []
        else:
            p2, links2 = f"{hired_s} {office_s}", [doc[("person", hired)], doc[("city", office)]]
        p1 = f"{name} is a {ind} company. " + " ".join(t for t, _ in rel)
        pages[doc[("org", i)]] = Page(name, "org", f"{name} is a {ind} company.", [
            ("paragraph", p1, [d for _, d in rel]), ("paragraph", p2, links2),
            ("table", f"Infobox of {name}. founded: {int(rng.integers(1850, 2010))}. industry: {ind}.", []),
            ("image", f"Image of {name}. Tags: logo, building, colour: {rng.choice(COLOURS)}.", [])])
    for key in [("landmark", i) for i in range(n_land)] + [("replica", r) for r in range(len(replicas))]:
        name, city = land_name(key), land_city_of(key)
        kind, mat, col = land_attr[key]
        other = ("landmark", pick(n_land))
        p1 = f"{name} is a famous {kind}. {name} stands in {cities[city]}."
        p2 = f"{name} was inspired by {land_name(other)}. {name} was restored in {int(rng.integers(1950, 2020))}."
        pages[doc[key]] = Page(name, "landmark", f"{name} is a {kind}.", [
            ("paragraph", p1, [doc[("city", city)]]), ("paragraph", p2, [doc[other]]),
            ("table", f"Infobox of {name}. material: {mat}. height: {int(rng.integers(5, 120))} m.", []),
            ("image", f"Image of {name}. Tags: {kind}, colour: {col}.", [])])

    comp_ids = {}
    k = 0
    for d, page in enumerate(pages):
        for j in range(len(page.components)):
            comp_ids[(d, j)] = k
            k += 1
    queries = _make_queries(rng, c.n_queries, doc, comp_ids, persons, orgs, o_founder, o_hq, p_born,
                            city_land, land_name)
    return {"pages": pages, "queries": queries}


def _make_queries(rng, n_queries, doc, comp_ids, persons, orgs, o_founder, o_hq, p_born, city_land, land_name):
    """Four multi-hop templates; GT = the answer-bearing component of the last hop, and the
    chain of components (one per hop) that leads there (used by the oracle and diagnostics)."""
    P1, TABLE, IMAGE = 0, 2, 3
    name_count = {}
    for p in persons:
        name_count[p] = name_count.get(p, 0) + 1
    out = []
    tries = 0
    while len(out) < n_queries and tries < 50 * n_queries:
        tries += 1
        t = int(rng.integers(0, 4))
        if t in (0, 3):
            o = int(rng.integers(0, len(orgs)))
            f = int(o_founder[o])
            org_d, per_d = doc[("org", o)], doc[("person", f)]
            if t == 0:
                text = f"What is the birth year of the founder of {orgs[o]}?"
                chain = [comp_ids[(org_d, P1)], comp_ids[(per_d, TABLE)]]
            else:
                city_d = doc[("city", int(p_born[f]))]
                text = f"What is the population of the city where the founder of {orgs[o]} was born?"
                chain = [comp_ids[(org_d, P1)], comp_ids[(per_d, P1)], comp_ids[(city_d, TABLE)]]
        elif t == 1:
            p = int(rng.integers(0, len(persons)))
            city = int(p_born[p])
            if name_count[persons[p]] > 1 or city not in city_land:
                continue  # the query must name its subject unambiguously and have an answer
            land_d = doc[city_land[city]]
            text = f"What is the material of the landmark in the city where {persons[p]} was born?"
            chain = [comp_ids[(doc[("person", p)], P1)], comp_ids[(doc[("city", city)], P1)],
                     comp_ids[(land_d, TABLE)]]
        else:
            o = int(rng.integers(0, len(orgs)))
            city = int(o_hq[o])
            if city not in city_land:
                continue
            land_d = doc[city_land[city]]
            text = f"What colour is the landmark in the city where {orgs[o]} is headquartered?"
            chain = [comp_ids[(doc[("org", o)], P1)], comp_ids[(doc[("city", city)], P1)],
                     comp_ids[(land_d, IMAGE)]]
        out.append({"qid": f"q{len(out)}", "text": text, "template": t, "chain": chain})
    return out


def build_corpus_stage(cfg, ctx) -> None:
    """Write docs / components / queries / qrels for one corpus seed (or copy a local corpus)."""
    seed = int(ctx.item["seed"])
    c = cfg.corpus
    if c.source == "local":
        return _local_corpus(c, ctx)
    data = generate(c, seed)
    pages, queries = data["pages"], data["queries"]
    write_table(ctx.out_dir / "docs.parquet", {
        "doc_id": list(range(len(pages))), "title": [p.title for p in pages],
        "kind": [p.kind for p in pages], "summary": [p.summary for p in pages]})
    rows = [(d, kind, text, links) for d, p in enumerate(pages) for kind, text, links in p.components]
    write_table(ctx.out_dir / "components.parquet", {
        "comp_id": list(range(len(rows))), "doc_id": [r[0] for r in rows], "kind": [r[1] for r in rows],
        "text": [r[2] for r in rows], "links": [list(map(int, r[3])) for r in rows]})
    # the retrievers read queries.parquet only; qrels and chains are for the evaluator
    write_table(ctx.out_dir / "queries.parquet", {"qid": [q["qid"] for q in queries],
                                                  "text": [q["text"] for q in queries]})
    write_table(ctx.out_dir / "qrels.parquet", {
        "qid": [q["qid"] for q in queries], "comp_id": [q["chain"][-1] for q in queries],
        "template": [q["template"] for q in queries], "chain": [q["chain"] for q in queries]})
    stats = {"n_docs": len(pages), "n_components": len(rows), "n_queries": len(queries),
             "n_namesake_docs": len(pages) - len({(p.kind, p.title) for p in pages}),
             "n_replicas": sum(p.title.endswith(" Replica") for p in pages)}
    write_json_atomic(ctx.out_dir / "stats.json", stats)
    ctx.write_metrics(stats)


def _local_corpus(c, ctx) -> None:
    """The paper profile: a parsed benchmark from ``corpus.data_root``, validated and renumbered."""
    from components.fif.paper import read_local_corpus

    tables, stats = read_local_corpus(c.data_root, c.n_queries, c.history_turns)
    for name, table in tables.items():
        write_table(ctx.out_dir / f"{name}.parquet", table)
    write_json_atomic(ctx.out_dir / "stats.json", stats)
    ctx.write_metrics(stats)
