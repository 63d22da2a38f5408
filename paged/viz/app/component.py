"""The lesson player as a Streamlit component: ``paged.viz.player.payload`` draws the frames, this
module puts its HTML, CSS and JavaScript on the page and hands it a payload."""

from __future__ import annotations

import functools

import streamlit as st

from paged.viz.classroom import routes as class_routes
from paged.viz.player.payload import asset, script, styles
from paged.viz.render import html


@functools.cache
def player_component():
    """The registered Streamlit component (v2, inline: no iframe), created once."""
    css = styles() + html.css()
    return st.components.v2.component(
        "pk_player",
        html=asset("player.html"),
        css=css,
        js=script(),
        isolate_styles=False,
    )


def mount_player(
    data: dict,
    start: int,
    present: bool,
    follow_end: bool = False,
    key: str = "pk_player",
    link_frame: bool = True,
) -> None:
    """Show the player at frame ``start`` (``present``: presenter mode on). ``link_frame``
    False: the page cannot reopen these frames from a link, so the player keeps no lesson,
    frame or presenter mode in the URL (and takes out any it wrote)."""
    player_component()(
        data={
            **data,
            "start": start,
            "present": present,
            "follow": follow_end,
            "link_frame": link_frame,
            # the class's routes are on this server (classroom.py): the lecturer may open one
            "classroom": class_routes.MOUNTED,
        },
        key=key,
        width="stretch",
    )
