"""Pure views: DataFrame -> plotly Figure, Trace -> escaped HTML / Markdown. Every HTML string the app shows
is built here and every text in it goes through one escape (``timeline.esc``). No gradio."""
