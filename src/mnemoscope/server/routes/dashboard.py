"""The dashboard pages (static HTML that calls the API; no data is rendered server-side)."""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["STATIC", "router"]

STATIC = resources.files("mnemoscope.server") / "static"

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
async def dashboard() -> Any:
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))


@router.get("/profile", response_class=HTMLResponse)
async def profile_page() -> Any:
    return HTMLResponse((STATIC / "profile.html").read_text(encoding="utf-8"))
