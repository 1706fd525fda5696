from statestream._cli import main

main()
