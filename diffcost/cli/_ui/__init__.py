"""``diffcost ui``: a web explorer of the cost model on this machine (issue 45).

:mod:`.answers` computes what each tab shows with the command line's own functions,
:mod:`.jobs` runs plan searches in child processes (progress, cancel), :mod:`.server` serves the
page (``static/``) and the JSON API on Python's ``http.server``."""
