def doc_to_text(doc):
    return doc["q"]
