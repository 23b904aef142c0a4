"""The reproduction report (``make_report``) and the results loader it shares with figures."""
