"""Tiny benchmark files in their published layouts (POPE, MMBench, CV-Bench, DocVQA, COCO
instances for CHAIR), with generated images, for the reader tests and the paper-shape test."""
import base64
import csv
import io
import json

import numpy as np

from tests.paper.layouts import write_jsonl


def png_bytes(seed: int, width: int = 24, height: int = 16) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def write_png(path, seed: int, width: int = 24, height: int = 16):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(seed, width, height))
    return path


def coco_val2014(root, n: int = 4):
    """val2014/COCO_val2014_<id>.jpg names (PNG bytes inside: PIL reads by content)."""
    names = [f"COCO_val2014_{i:012d}.jpg" for i in range(1, n + 1)]
    for i, name in enumerate(names):
        write_png(root / "val2014" / name, 10 + i)
    return root / "val2014", names


def write_pope(root, labels=("yes", "no", "yes", "no")):
    images, names = coco_val2014(root, len(labels))
    rows = [{"question_id": i + 1, "image": name, "text": f"Is there a {obj} in the image?", "label": label}
            for i, (name, obj, label) in enumerate(zip(names, ["dog", "cat", "car", "cup"], labels))]
    return write_jsonl(root / "coco_pope_random.json", rows), images


MMBENCH_HEADER = ["index", "question", "hint", "A", "B", "C", "D", "answer", "category", "image"]


def mmbench_rows():
    """Three questions: 4 options with a hint, 3 options, and one re-using row 0's image by index."""
    image = base64.b64encode(png_bytes(1)).decode()
    return [
        {"index": "0", "question": "What colour is the car?", "hint": "A street scene.", "A": "red", "B": "blue",
         "C": "green", "D": "white", "answer": "B", "category": "attribute_recognition", "image": image},
        {"index": "1", "question": "How many dogs?", "hint": "nan", "A": "one", "B": "two", "C": "three",
         "D": "", "answer": "C", "category": "counting",
         "image": base64.b64encode(png_bytes(2, 16, 24)).decode()},
        {"index": "2", "question": "Is it day?", "hint": "", "A": "yes", "B": "no", "C": "", "D": "",
         "answer": "A", "category": "scene", "image": "0"},
    ]


def write_mmbench(path, rows=None, header=MMBENCH_HEADER):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header, delimiter="\t", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(mmbench_rows() if rows is None else rows)
    return path


def cvbench_rows():
    specs = [("2D", "Count", "ADE20K", ["1", "2", "3"], "(B)"), ("2D", "Relation", "ADE20K", ["left", "right"], "(A)"),
             ("2D", "Count", "COCO", ["0", "1", "2", "3"], "(D)"), ("2D", "Relation", "COCO", ["above", "below"], "(B)"),
             ("3D", "Depth", "Omni3D", ["the chair", "the lamp"], "(A)"), ("3D", "Distance", "Omni3D", ["x", "y"], "(B)")]
    return [{"idx": i, "type": t, "task": task, "image": f"img/{t}/{task.lower()}/{src.lower()}_{i}.png",
             "question": f"Question {i}?", "choices": choices, "answer": answer, "source": src}
            for i, (t, task, src, choices, answer) in enumerate(specs)]


def write_cvbench(root, rows=None):
    rows = cvbench_rows() if rows is None else rows
    for i, row in enumerate(rows):
        write_png(root / row["image"], 30 + i)
    return write_jsonl(root / "test.jsonl", rows)


def write_docvqa(root, rows=None):
    rows = rows if rows is not None else [
        {"questionId": 1, "question": "What is the date?", "image": "documents/a.png", "docId": 1,
         "answers": ["1 March 1990", "March 1, 1990"], "data_split": "val"},
        {"questionId": 2, "question": "Who signed?", "image": "documents/b.png", "docId": 2,
         "answers": ["J. Smith"], "data_split": "val"}]
    for i, row in enumerate(rows):
        if "image" in row:
            write_png(root / row["image"], 40 + i, 20, 30)
    path = root / "val_v1.0.json"
    path.write_text(json.dumps({"dataset_name": "docvqa", "dataset_split": "val", "data": rows}))
    return path


def write_coco_instances(root, n_images: int = 4):
    """instances_val2014.json for the val2014 images of ``coco_val2014`` (same names)."""
    images, names = coco_val2014(root, n_images)
    categories = [{"id": 18, "name": "dog"}, {"id": 17, "name": "cat"}, {"id": 63, "name": "couch"},
                  {"id": 1, "name": "person"}]
    objects = [[18, 63], [17], [1, 18], [63]]
    data = {"images": [{"id": i + 1, "file_name": name} for i, name in enumerate(names)],
            "annotations": [{"id": 100 * (i + 1) + k, "image_id": i + 1, "category_id": c}
                            for i in range(n_images) for k, c in enumerate(objects[i % len(objects)])],
            "categories": categories}
    path = root / "annotations" / "instances_val2014.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path, images
