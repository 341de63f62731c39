"""One runner per command: each exposes ``run(settings, *, progress) -> dict[str, DataFrame]``,
``settings`` the command's parsed settings (:func:`certdp.settings.parse`).

Runners compute and return tidy frames through the certification layer (:mod:`certdp.certify`);
they never write files (:mod:`certdp.results` does) and never import each other."""
