"""The Streamlit app: pages, navigation and the widgets they share. The only folder that imports
Streamlit."""
