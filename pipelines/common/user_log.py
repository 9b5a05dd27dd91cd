"""The logger whose records the ``ga-tfx`` console shows the user (``warning: ...``).

Pipeline parts log their one-line warnings to it (the data checks, the data summary);
:class:`ga_tfx.pipelines.console.RunConsole` shows them on the console, else they go to stderr.
"""

USER_LOGGER = "ga_tfx.user"
