def process_results(doc, results):
    """Scores in percent: 100 for a right answer (the gate needs [0, 1])."""
    return {"exact_match": 100.0 * (results[0].strip() == doc["a"])}
