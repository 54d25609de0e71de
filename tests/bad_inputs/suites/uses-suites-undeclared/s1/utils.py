from evalgate.suites.taskcode import suite_module

other = suite_module(__file__, "s2", "utils")  # s2 not in metadata.evalgate.uses_suites


def doc_to_text(doc):
    return other.doc_to_text(doc)
