"""An agent of the gateway's hostile-input integration tests (importable by Ray workers through
PYTHONPATH): it answers with numbers JSON has no form for."""

from __future__ import annotations

from pydantic import BaseModel

import reach


@reach.schema("gwh.ask@1.0")
class GwhAsk(BaseModel):
    value: str  # a float's name: "nan", "inf", "1.5"


@reach.schema("gwh.reading@1.0")
class GwhReading(BaseModel):
    value: float


class GwhMeter(reach.Agent):
    capabilities = ("gwh.meter.read",)
    description = "Reads a meter; asked for NaN, it answers NaN."

    @reach.handler(GwhAsk, returns=GwhReading)
    async def read(self, ctx: reach.Context, m: GwhAsk) -> GwhReading:
        return GwhReading(value=float(m.value))
