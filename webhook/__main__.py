"""`python -m webhook serve ...`: the commands of `gate webhook`, without the console script."""

from webhook.cli import webhook

if __name__ == "__main__":
    webhook(prog_name="python -m webhook")
