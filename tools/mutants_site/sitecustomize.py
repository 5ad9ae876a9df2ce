"""Coverage in the child processes a conformance test starts (``run_child``), for ``make mutants``'s
coverage pass only (:mod:`tools.mutants` puts this directory on PYTHONPATH then): each child records
its lines under the context of the test that started it (``EO_MUTANTS_CONTEXT``), and saves them even
when it dies by a crash failpoint (``os._exit``)."""
import os

if os.environ.get("EO_MUTANTS_COVERAGE") and os.environ.get("EO_MUTANTS_CONTEXT"):
    import atexit

    import coverage

    _cov = coverage.Coverage(data_file=os.environ["EO_MUTANTS_COVERAGE"], data_suffix=True,
                             include=["*/exactly_once/*"], branch=False, config_file=False)
    _cov.start()
    _cov.switch_context(os.environ["EO_MUTANTS_CONTEXT"])

    def _save() -> None:
        _cov.stop()
        _cov.save()

    _real_exit = os._exit

    def _exit(code: int) -> None:  # a crash failpoint: keep what ran up to it
        _save()
        _real_exit(code)

    os._exit = _exit
    atexit.register(_save)
