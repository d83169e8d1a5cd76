"""Whether a cited text supports the claim that cites it: the lexical check (``lexical``), pure
and in-process, and what a judge model is asked and answers (``judge``)."""
