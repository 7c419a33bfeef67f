"""The building blocks of the self-contained HTML pages the tools write (the pilot's
``report.html``, ``plan.html``): markup, the stylesheet and embedded figures, below the tools
so that none of them imports another for its look."""
