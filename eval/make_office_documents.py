"""Writes the golden set's Office documents (documents/*.docx, .xlsx, .pptx), which are committed:
run it only to change them (`.venv/bin/python eval/make_office_documents.py`). They are made by
other tools than the ones Citegate reads them with (tests/office_files.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.office_files import slides_file, word_file, workbook_file  # noqa: E402

DOCUMENTS = Path(__file__).resolve().parent / "documents"

HANDBOOK = word_file(
    [
        ("Title", "Northwind Traders employee handbook"),
        ("Heading1", "Working hours"),
        "Core hours are from 10:00 to 15:00; outside them, employees choose when they work.",
        "Employees may work from home up to three days a week after their probation period.",
        ("Heading1", "Leave"),
        "Full-time employees receive 28 days of paid annual leave, plus public holidays.",
        "Unused leave can be carried over until 31 March of the following year.",
        "Parents receive 16 weeks of paid parental leave.",
        ("Heading1", "Expenses"),
        "Travel expenses must be submitted within 30 days, with receipts attached.",
        "Train travel is booked in second class; flights are allowed only for trips over 600 km.",
        ("Heading1", "Equipment allowance"),
        [
            ["Item", "Allowance", "Replaced every"],
            ["Laptop", "1,800 EUR", "4 years"],
            ["Monitor", "350 EUR", "6 years"],
            ["Office chair", "600 EUR", "8 years"],
        ],
        "The probation period lasts six months.",
    ]
)

PRICE_LIST = workbook_file(
    {
        "Prices 2025": [
            ["Product", "SKU", "Unit price (EUR)", "Stock"],
            ["Oak desk", "NW-1001", 420, 35],
            ["Walnut bookshelf", "NW-1002", 289, 12],
            ["Ergonomic chair", "NW-1003", 349, 58],
            ["Standing desk frame", "NW-1004", 515, 7],
            ["Desk lamp", "NW-1005", 39, 240],
        ],
        "Suppliers": [
            ["Supplier", "Country", "Lead time (days)"],
            ["Holzwerk Bauer", "Germany", 21],
            ["Nordic Seating", "Sweden", 14],
            ["Lumen & Co", "Italy", 30],
        ],
    }
)

ROADMAP = slides_file(
    [
        (
            "Project Heron roadmap",
            "Project Heron replaces the legacy billing system.",
            "Presented to the steering committee in January.",
        ),
        (
            "Milestones",
            "The pilot starts in May with 40 customers.\nGeneral availability is planned for "
            "November.",
            "",
        ),
        (
            "Budget",
            "The approved budget is 2.4 million euros.\nHosting costs are expected to fall by 35%.",
            "The budget includes a 10% contingency.",
        ),
        (
            "Risks",
            "The main risk is migrating 12 years of invoices.\nA second risk is the payment "
            "provider's API change in September.",
            "",
        ),
    ]
)


def main() -> None:
    DOCUMENTS.mkdir(exist_ok=True)
    (DOCUMENTS / "handbook.docx").write_bytes(HANDBOOK)
    (DOCUMENTS / "price_list.xlsx").write_bytes(PRICE_LIST)
    (DOCUMENTS / "roadmap.pptx").write_bytes(ROADMAP)


if __name__ == "__main__":
    main()
