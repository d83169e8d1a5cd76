"""Make tests/fixtures/pdf/chinese-report.pdf: a two-page text PDF in Simplified Chinese, for
the good PDFs the text-layer verdict must not flag (tests/unit/test_text_layer_verdict.py).

The text is Citegate's own (a made-up report, written for this file). The font is WenQuanYi
Micro Hei (Debian's fonts-wqy-microhei, Apache-2.0 or GPL-3+ with the font exception), embedded
as a subset by fpdf2, which is not one of Citegate's dependencies; run it as

    apt-get install fonts-wqy-microhei
    uv run --no-project --with fpdf2==2.8.* python scripts/make_chinese_pdf.py

It writes the same bytes each time (no creation date), so the file changes only with this
script.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from fpdf import FPDF
from fpdf.fonts import FontFace

FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pdf" / "chinese-report.pdf"

TITLE = "城市雨水收集试点项目年度报告"
SECTIONS = [
    (
        "第一节 项目概况",
        "本项目于二〇二四年三月在滨江新区启动，目标是在三年内将屋顶雨水收集率提高到百分之"
        "四十。试点覆盖十二个住宅小区、三所学校和一座体育馆，总屋顶面积约为十八万平方米。"
        "项目由区水务局牵头，街道办事处和物业公司共同负责日常运行。",
    ),
    (
        "第二节 主要成果",
        "截至十二月底，共安装储水罐二百六十个，累计收集雨水约四万二千立方米，主要用于绿化"
        "灌溉和道路清洗。与去年同期相比，试点区域的自来水用量下降了百分之十一点五。居民"
        "满意度调查显示，百分之八十七的受访者支持继续推广。",
    ),
    (
        "第三节 存在的问题",
        "部分老旧小区的排水管道年久失修，雨季时容易堵塞，影响收集效率。此外，储水罐的日常"
        "维护需要专人负责，目前维护费用仍由区政府承担，长期资金来源尚未确定。",
    ),
]
PAGE_TWO = [
    (
        "第四节 下一步计划",
        "明年将把试点扩大到六个街道，并与本地高校合作建立监测平台，实时记录降雨量、储水量"
        "和用水量。我们还计划编写一本面向居民的操作手册，说明储水罐的清洁方法和冬季防冻措施。",
    ),
]
TABLE = [
    ("月份", "降雨量（毫米）", "收集量（立方米）"),
    ("四月", "86", "3,120"),
    ("五月", "142", "5,480"),
    ("六月", "231", "8,950"),
    ("七月", "198", "7,630"),
    ("八月", "175", "6,410"),
]


def make() -> bytes:
    pdf = FPDF(format="A4")
    pdf.set_creation_date(datetime(2026, 12, 7, tzinfo=UTC))  # the same bytes on every run
    pdf.set_title(TITLE)
    pdf.add_font("wqy", fname=str(FONT), collection_font_number=0)
    pdf.set_margins(20, 20, 20)
    pdf.add_page()
    pdf.set_font("wqy", size=18)
    pdf.multi_cell(0, 12, TITLE, new_x="LMARGIN", new_y="NEXT")
    _sections(pdf, SECTIONS)
    pdf.add_page()
    _sections(pdf, PAGE_TWO)
    pdf.set_font("wqy", size=11)
    pdf.multi_cell(0, 8, "附表 试点区域各月降雨量与收集量", new_x="LMARGIN", new_y="NEXT")
    # No bold heading: the font has one style.
    heading = FontFace(emphasis="")
    with pdf.table(col_widths=(30, 50, 50), text_align="CENTER", headings_style=heading) as table:
        for cells in TABLE:
            row = table.row()
            for cell in cells:
                row.cell(cell)
    return bytes(pdf.output())


def _sections(pdf: FPDF, sections: list[tuple[str, str]]) -> None:
    for heading, body in sections:
        pdf.set_font("wqy", size=13)
        pdf.multi_cell(0, 10, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("wqy", size=11)
        pdf.multi_cell(0, 7, body, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)


def main() -> int:
    OUT.write_bytes(make())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
