import sys

from litert_convert.main import main

sys.exit(main())
