from blackwell_sm.cli import main

main()
