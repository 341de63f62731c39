"""Developer tools of the certdp source tree (not shipped in the wheel): the hostile-input prober
(:mod:`tools.prober`) and the settings reference generator (``tools/settings_doc.py``)."""
