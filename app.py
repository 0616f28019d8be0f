"""specviz: see speculative decoding. Run `python app.py` and open the printed URL."""
from specviz.app import build_demo, launch

if __name__ == "__main__":
    launch(build_demo())
