"""The project's input fuzz suite (issue 18): mutated spec files, Hugging Face configs and
command-line flags, each run as a user would run it, each judged as a clear answer, a clear
refusal, or a defect (traceback, unclear message, NaN answer, infeasible reported feasible).

``python -m tests.fuzz`` runs the release profile (every case) and prints the counts;
``tests/test_fuzz.py`` runs the CI profile (every k-th case and a few hundred hypothesis
flag combinations) in the default test run and the release profile under ``-m slow``.
"""
