"""What answering needs of the process: built once, in the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.answers.live import LiveAnswers
from app.auth.budgets import Pricing
from app.auth.limits import KeyLimits
from app.db.engine import RowInserter, RowUpdater
from app.documents.pages import PdfPages
from app.documents.sources import SourceCache
from app.observability import Metrics
from app.settings import Settings
from app.upstream.client import UpstreamClient


@dataclass(frozen=True, slots=True)
class AnswerContext:
    """The process-wide parts that answering needs."""

    upstream: UpstreamClient
    sources: SourceCache
    limits: KeyLimits
    settings: Settings
    engine: AsyncEngine
    answers: RowInserter  # stores an answer's row
    answer_ends: RowUpdater  # finishes a streamed answer's row (``store.ENDING_COLUMNS``)
    live: LiveAnswers  # the streams in progress
    sessions: async_sessionmaker[AsyncSession]  # bound to ``engine``
    metrics: Metrics
    pages: PdfPages  # the boxes of PDF spans
    prices: Pricing  # what a call costs (``app.usage.prices``), for budgets
