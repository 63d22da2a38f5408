"""Frames drawn: the arena grid as SVG, the text panels as HTML, lecture figures with plotly."""
